package metrics

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Label values that come from plugins (names the proxy saw, audited rules that
// quote manifest entries and addresses) cannot grow the series without bound: a
// plugin label is an installed plugin's name or "other", a rule label one of a
// fixed set of list classes. The output parses with Prometheus' own parser.
func TestLabelsAreBoundedAndParse(t *testing.T) {
	m := New()
	m.SetPlugins([]string{"demo"})
	for i := range 1000 {
		m.Egress(fmt.Sprintf("forged-%d\"\n{x=\"y\"}", i), "deny", fmt.Sprintf("address-guard 10.0.%d.%d", i/256, i%256), 0)
		m.Egress("demo", "allow", fmt.Sprintf("manifest h%d.example:443 + tenant .example (line %d)", i, i), 0)
		m.Egress("demo", "deny", fmt.Sprintf("manifest+tenant h%d.example", i), 0)
		m.ToolCall(fmt.Sprintf("p%d", i), "ok", time.Millisecond)
		m.HookRun(fmt.Sprintf("h%d", i), "PreToolUse", i%2 == 0)
	}
	m.Egress("demo", "end", "manifest x", 4096)
	m.TenantReload(true)
	m.SandboxStart("bwrap", 300*time.Millisecond)
	m.CollectServers(func() []ServerCount {
		out := []ServerCount{{Plugin: "demo", Server: "main", State: "running", Servers: 1, NotesDropped: 7}}
		for i := range 100 {
			out = append(out, ServerCount{Plugin: fmt.Sprintf("gone-%d", i), Server: fmt.Sprintf("s%d", i), State: "running", Servers: 1, NotesDropped: 1})
		}
		return out
	})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	series := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, mm := range fams[name].GetMetric() {
			k := ""
			for _, l := range mm.GetLabel() {
				k += l.GetName() + "=" + l.GetValue() + ","
			}
			switch {
			case mm.Counter != nil:
				out[k] = mm.GetCounter().GetValue()
			case mm.Histogram != nil:
				out[k] = float64(mm.GetHistogram().GetSampleCount())
			}
		}
		return out
	}
	eg := series("oz0_egress_decisions_total")
	want := map[string]float64{
		"decision=deny,plugin=other,rule=address-guard,":   1000,
		"decision=allow,plugin=demo,rule=manifest+tenant,": 1000,
		"decision=deny,plugin=demo,rule=manifest+tenant,":  1000,
	}
	if len(eg) != len(want) {
		t.Fatalf("egress series %v, want exactly %v", eg, want)
	}
	for k, v := range want {
		if eg[k] != v {
			t.Errorf("egress %s = %v, want %v", k, eg[k], v)
		}
	}
	if c := series("oz0_tool_calls_total"); len(c) != 1 || c["outcome=ok,plugin=other,"] != 1000 {
		t.Errorf("tool calls of uninstalled plugins: %v, want one series plugin=other", c)
	}
	if h := series("oz0_hook_runs_total"); len(h) != 2 {
		t.Errorf("hook runs of uninstalled plugins: %v, want two series (allow, block) under plugin=other", h)
	}
	if b := series("oz0_egress_relayed_bytes_total"); b["plugin=demo,"] != 4096 {
		t.Errorf("relayed bytes %v", b)
	}
	if n := series("oz0_server_notifications_dropped_total"); len(n) != 2 || n["plugin=demo,server=main,"] != 7 || n["plugin=other,server=other,"] != 100 {
		t.Errorf("dropped notifications %v, want demo/main 7 and the servers of uninstalled plugins as other/other", n)
	}
	if s := series("oz0_sandbox_start_duration_seconds"); s["backend=bwrap,"] != 1 {
		t.Errorf("sandbox starts %v", s)
	}
	// Every family of the node's own carries its help and type, a histogram its
	// buckets; the runtime's and the process's series follow.
	for name, f := range fams {
		if !strings.HasPrefix(name, "oz0_") {
			continue
		}
		if want := families[name]; f.GetHelp() != want[1] || !strings.EqualFold(f.GetType().String(), want[0]) {
			t.Errorf("%s: help %q type %s, want %q %s", name, f.GetHelp(), f.GetType(), want[1], want[0])
		}
	}
	if h := fams["oz0_tool_call_duration_seconds"].GetMetric(); len(h) != 1 || len(h[0].GetHistogram().GetBucket()) != len(callBuckets)+1 {
		t.Errorf("call duration histogram %v, want one series with %d buckets and +Inf", h, len(callBuckets))
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines"} {
		if f := fams[name]; f == nil || f.GetType().String() != "GAUGE" || f.GetMetric()[0].GetGauge().GetValue() <= 0 {
			t.Errorf("%s: %v", name, f)
		}
	}
}

func TestRuleClass(t *testing.T) {
	for _, tc := range []struct{ decision, rule, want string }{
		{"allow", "manifest api.example.com:443 + tenant .example.com (line 2)", "manifest+tenant"},
		{"deny", "manifest", "manifest"},
		{"deny", "server+tenant", "server+tenant"},
		{"deny", "address-guard 169.254.169.254", "address-guard"},
		{"deny", "tenant-list-unreadable", "tenant-list-unreadable"},
		{"error", "manifest x: dial tcp: refused", "manifest"},
		{"deny", "anything a plugin wrote", "other"},
	} {
		if got := RuleClass(tc.decision, tc.rule); got != tc.want {
			t.Errorf("RuleClass(%q, %q) = %q, want %q", tc.decision, tc.rule, got, tc.want)
		}
	}
}

// BenchmarkToolCall is the metrics' work for one routed call, as the gateway
// records every call.
func BenchmarkToolCall(b *testing.B) {
	m := New()
	m.SetPlugins([]string{"demo"})
	b.ReportAllocs()
	for b.Loop() {
		m.ToolCall("demo", "ok", time.Millisecond)
	}
}

// BenchmarkToolCallParallel is BenchmarkToolCall with callers on every CPU, as
// the node's callers are.
func BenchmarkToolCallParallel(b *testing.B) {
	m := New()
	m.SetPlugins([]string{"demo"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ToolCall("demo", "ok", time.Millisecond)
		}
	})
}
