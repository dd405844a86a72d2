package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// mcpPost sends one JSON-RPC message to the node's MCP socket and returns the
// status and the session header.
func mcpPost(t *testing.T, c *http.Client, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://node/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", body, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

// trickleCut sends a request whose body arrives a byte every half second and
// returns how long the node kept the connection open (capped at limit).
func trickleCut(t *testing.T, sock string, limit time.Duration) time.Duration {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /v1/status HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, bufio.NewReader(conn))
		close(closed)
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			return time.Since(start)
		case <-tick.C:
			if time.Since(start) > limit {
				return limit
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				<-closed
				return time.Since(start)
			}
		}
	}
}

// Abandoned and slow clients: a trickled body is cut on both sockets, an idle
// session expires, and a call that times out is not held up by its session's
// DELETE.
func TestE2EAbandonedClientsAreReleased(t *testing.T) {
	n := newE2E(t, []string{"unruly"}, "--backend", backendsForE2E(t)[0], "--mcp-session-idle", "2s")
	n.waitState("unruly", "main", api.StateRunning)
	d := n.dir()

	for _, sock := range []string{d.MCP(), d.Control()} {
		if got := trickleCut(t, sock, 25*time.Second); got > 15*time.Second {
			t.Errorf("%s: a trickled body kept its connection %v (want it cut after ~10s)", sock, got)
		}
	}

	c := unixHTTP(d.MCP())
	code, session := mcpPost(t, c, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"abandoner","version":"1"}}}`)
	if code != 200 || session == "" {
		t.Fatalf("initialize: %d session %q", code, session)
	}
	mcpPost(t, c, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if code, _ := mcpPost(t, c, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); code != 200 {
		t.Fatalf("tools/list on a live session: %d", code)
	}
	time.Sleep(4 * time.Second) // twice the idle timeout, no request
	if code, _ := mcpPost(t, c, session, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); code != http.StatusNotFound {
		t.Errorf("an idle session still answers after the idle timeout: %d, want 404", code)
	}

	// The client's cancel notification and its DELETE race: try a few times.
	for i := range 5 {
		start := time.Now()
		out, err := exec.Command(n.bin, "--data-dir", n.data, "call", "unruly__hang", "--timeout", "2s").CombinedOutput()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("a call that never answers succeeded: %s", out)
		}
		if took > 4500*time.Millisecond {
			t.Errorf("try %d: call --timeout 2s took %v: its session's DELETE was not answered promptly", i, took)
		}
	}
}

// hasFinding reports whether the node's status lists a finding of code about subject.
func (n *e2eNode) hasFinding(code, subject string) bool {
	for _, f := range n.status().Findings {
		if f.Code == code && f.Subject == subject {
			return true
		}
	}
	return false
}

// A result over the node's limit is answered to its caller as an error; the
// connection to the server, and a call in flight on it, go on.
func TestE2EResultTooLargeIsAToolError(t *testing.T) {
	n := newE2E(t, []string{"unruly"}, "--backend", backendsForE2E(t)[0])
	n.waitState("unruly", "main", api.StateRunning)
	pids := serverPIDs(n.data)

	// The fixture answers one call at a time: an echo sent while the big call
	// sleeps is in flight on the same connection when the big result arrives.
	type res struct {
		out string
		err error
	}
	bigDone := make(chan res, 1)
	go func() {
		out, err := n.oz("call", "unruly__big", "--arg", "mib=17", "--arg", "sleep=2", "--timeout", "60s")
		bigDone <- res{out, err}
	}()
	time.Sleep(700 * time.Millisecond)
	out, err := n.oz("call", "unruly__echo", "--arg", "text=queued", "--timeout", "60s")
	if err != nil || strings.TrimSpace(out) != "queued" {
		t.Errorf("a call in flight behind the too-large result: %v %q", err, out)
	}
	big := <-bigDone
	if big.err == nil || !strings.Contains(big.out, "result too large") {
		t.Errorf("a 17 MiB result: err %v, output %.300q; want a 'result too large' tool error", big.err, big.out)
	}
	if out, err := n.oz("call", "unruly__echo", "--arg", "text=still", "--timeout", "10s"); err != nil || strings.TrimSpace(out) != "still" {
		t.Errorf("echo after the too-large result: %v %q", err, out)
	}
	if now := serverPIDs(n.data); strings.Join(now, ",") != strings.Join(pids, ",") {
		t.Errorf("the server was restarted (pids %v, now %v)", pids, now)
	}
	if out, err := n.oz("call", "unruly__big", "--arg", "mib=2", "--timeout", "60s"); err != nil || len(out) < 2<<20 {
		t.Errorf("a 2 MiB result: err %v, %d bytes", err, len(out))
	}
	if !n.hasFinding(api.CodeResultTooLarge, "unruly/main") {
		t.Errorf("no %s finding for unruly/main: %+v", api.CodeResultTooLarge, n.status().Findings)
	}
}

// A server offering more tools than the per-server limit gets only the limit
// served, and a finding.
func TestE2EToolCountIsBounded(t *testing.T) {
	n := newE2E(t, []string{"crowded"}, "--backend", backendsForE2E(t)[0])
	n.waitState("crowded", "main", api.StateRunning)
	var tools int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range n.status().Plugins {
			for _, s := range p.Servers {
				if p.Name == "crowded" {
					tools = len(s.Tools)
				}
			}
		}
		if tools > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if tools != 2000 {
		t.Errorf("crowded offers 2101 tools; the node serves %d, want 2000", tools)
	}
	if !n.hasFinding(api.CodeToolCountLimit, "crowded/main") {
		t.Errorf("no %s finding for crowded/main", api.CodeToolCountLimit)
	}
}

// Connections over the proxy's per-plugin cap are closed unanswered: status counts
// them by cause and a finding names the plugin.
func TestE2EEgressConnCapIsCounted(t *testing.T) {
	n := newE2E(t, []string{"egress-demo"}, "--backend", backendsForE2E(t)[0])
	n.waitState("egress-demo", "fetcher", api.StateRunning)
	sock := filepath.Join(n.dir().EgressSocketDir("egress-demo"), "egress.sock")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range 600 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("dial %s: %v", sock, err)
		}
		conns = append(conns, c)
	}
	var refused int64
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range n.status().Plugins {
			if p.Name == "egress-demo" {
				refused = p.Refused["conn-cap"]
			}
		}
		if refused >= 88 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if refused < 88 {
		t.Errorf("600 connections against a cap of 512: status counts %d refused at the cap, want at least 88", refused)
	}
	resp, err := unixHTTP(n.dir().Control()).Get("http://node/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `oz0_egress_refused_total{cause="conn-cap",plugin="egress-demo"}`) {
		t.Errorf("metrics have no conn-cap refusals for egress-demo:\n%s", grepLines(string(body), "oz0_egress"))
	}
	if !n.hasFinding(api.CodeEgressConnCap, "egress-demo") {
		t.Errorf("no %s finding for egress-demo", api.CodeEgressConnCap)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
