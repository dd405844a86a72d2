package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches /metrics from the control socket (socket != "") or a loopback
// URL and parses it with Prometheus' own text parser.
func scrape(t *testing.T, socket, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeWith(t, socket, url, "")
}

// scrapeWith is scrape presenting a bearer token (none: "").
func scrapeWith(t *testing.T, socket, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	hc := http.DefaultClient
	if socket != "" {
		hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
		url = "http://oz0-node/metrics"
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value sums the samples of a family whose labels include want (counter, gauge,
// or a histogram's sample count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A real node in a real sandbox, scraped on its control socket and on
// --metrics-listen: a tool call, an allowed fetch, a denied fetch and a tenant-list
// change each move their series.
func TestE2EMetricsMoveWithCallsAndEgress(t *testing.T) {
	backend := ""
	for _, b := range backendsForE2E(t) {
		if b == "bwrap" || b == "gvisor" {
			backend = b
			break
		}
	}
	if backend == "" {
		t.Skip("not tested: needs bwrap or gVisor (CI installs both)")
	}
	port := freePort(t)
	e := newEgressEnv(t, backend, "--metrics-listen", "127.0.0.1:"+strconv.Itoa(port))
	sock := filepath.Join(e.data, "run", "control.sock")
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	plugin := map[string]string{"plugin": "egress-demo"}

	before := scrape(t, sock, "")
	if v := value(before, "oz0_servers", map[string]string{"plugin": "egress-demo", "state": "running"}); v != 1 {
		t.Errorf("oz0_servers{egress-demo,running} = %v, want 1", v)
	}
	if v := value(before, "oz0_sandbox_start_duration_seconds", map[string]string{"backend": backend}); v < 1 {
		t.Errorf("no sandbox start observed for %s", backend)
	}

	plainPort := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
	if out, err := e.oz("call", "egress-demo__fetch", "--arg", "url=http://allowed.test:"+plainPort+"/"); err != nil || !strings.HasPrefix(out, "200") {
		t.Fatalf("allowed fetch: %v %q", err, out)
	}
	out, _ := e.oz("call", "egress-demo__fetch", "--arg", "url=http://tenant-only.test:"+plainPort+"/")
	if !strings.Contains(out, "403") {
		t.Fatalf("fetch of a host the manifest does not list: %q, want the proxy's 403", out)
	}
	e.tenant("allowed.test\n")
	time.Sleep(300 * time.Millisecond) // the "end" of the allowed connection and its bytes

	token, err := os.ReadFile(filepath.Join(e.data, "metrics.token"))
	if err != nil {
		t.Fatal(err)
	}
	after := scrapeWith(t, "", url, strings.TrimSpace(string(token))) // the same registry over --metrics-listen
	delta := func(name string, labels map[string]string) float64 {
		return value(after, name, labels) - value(before, name, labels)
	}
	if d := delta("oz0_tool_calls_total", plugin); d != 2 {
		t.Errorf("oz0_tool_calls_total{egress-demo} moved by %v, want 2", d)
	}
	if d := delta("oz0_tool_calls_total", map[string]string{"plugin": "egress-demo", "outcome": "ok"}); d < 1 {
		t.Errorf("oz0_tool_calls_total{egress-demo,ok} moved by %v, want ≥1", d)
	}
	if d := delta("oz0_tool_call_duration_seconds", plugin); d != 2 {
		t.Errorf("call latency histogram count moved by %v, want 2", d)
	}
	if d := delta("oz0_egress_decisions_total", map[string]string{"plugin": "egress-demo", "decision": "deny", "rule": "manifest"}); d != 1 {
		t.Errorf("egress denials {egress-demo,manifest} moved by %v, want 1", d)
	}
	if d := delta("oz0_egress_decisions_total", map[string]string{"plugin": "egress-demo", "decision": "allow"}); d != 1 {
		t.Errorf("egress allows {egress-demo} moved by %v, want 1", d)
	}
	if d := delta("oz0_egress_relayed_bytes_total", plugin); d <= 0 {
		t.Errorf("relayed bytes moved by %v, want > 0", d)
	}
	if d := delta("oz0_tenant_list_reloads_total", map[string]string{"result": "ok"}); d != 1 {
		t.Errorf("tenant reloads moved by %v, want 1", d)
	}
}

// --metrics-listen serves only on loopback: any other address is a usage error
// before the node starts.
func TestMetricsListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9464", "[::]:9464", "192.0.2.1:9464", "localhost:9464"} {
		r := cliRun(t, "--data-dir", t.TempDir(), "run", "--metrics-listen", addr)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--metrics-listen") {
			t.Errorf("run --metrics-listen %s: exit %d, %q; want exit 2 naming the flag", addr, r.code, r.stderr)
		}
	}
}

// Hook runs and their decisions, and the calls they block, counted on a real node
// whose claude-hooks guard (in its own sandbox) blocks a call mentioning
// "forbidden".
func TestE2EMetricsCountHookRunsAndBlocks(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"claude-hooks"}, "--backend", backends[0])
	n.waitState("claude-hooks", "notes", "running")
	sock := filepath.Join(n.data, "run", "control.sock")
	pre := func(decision string) map[string]string {
		return map[string]string{"plugin": "claude-hooks", "event": "PreToolUse", "decision": decision}
	}
	call := func(outcome string) map[string]string {
		return map[string]string{"plugin": "claude-hooks", "outcome": outcome}
	}
	before := scrape(t, sock, "")
	if out, err := n.oz("call", "claude-hooks__echo", "--arg", "text=forbidden words"); err == nil || !strings.Contains(out, "not allowed") {
		t.Fatalf("hook did not block: %v %q", err, out)
	}
	if out, err := n.oz("call", "claude-hooks__echo", "--arg", "text=fine words"); err != nil {
		t.Fatalf("allowed call: %v %q", err, out)
	}
	after := scrape(t, sock, "")
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"oz0_hook_runs_total", pre("block")},
		{"oz0_hook_runs_total", pre("allow")},
		{"oz0_tool_calls_total", call("blocked")},
		{"oz0_tool_calls_total", call("ok")},
	} {
		if d := value(after, c.name, c.labels) - value(before, c.name, c.labels); d != 1 {
			t.Errorf("%s%v moved by %v, want 1", c.name, c.labels, d)
		}
	}
}
