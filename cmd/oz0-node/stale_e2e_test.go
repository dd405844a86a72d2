package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// A call answers the reason that holds now, never a refusal the operator has
// lifted: a value set for a server held back for it, a host added to the tenant
// list for a remote server — even one that then never connects (docs/promises.md
// §4, §9).
func TestE2ECallAnswersTheReasonThatHoldsNow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the private mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	backends := backendsForE2E(t)

	t.Run("a value set", func(t *testing.T) {
		n := newE2E(t, []string{"needs-config"}, "--backend", backends[0])
		n.waitState("needs-config", "main", api.StateRefused)
		if out, err := n.oz("call", "needs-config__echo", "--arg", "text=x"); err == nil || !strings.Contains(out, "api_token") {
			t.Fatalf("before: %v\n%s", err, out)
		}
		if out, err := n.oz("plugin", "config", "needs-config", "api_token=tok-e2e"); err != nil {
			t.Fatalf("plugin config: %v\n%s", err, out)
		}
		// At once, before any reconcile could have started the server.
		out, _ := n.oz("call", "needs-config__echo", "--arg", "text=x")
		if strings.Contains(out, "api_token") || strings.Contains(out, "needs a value") {
			t.Errorf("after the value was set a call still answers the old refusal:\n%s", out)
		}
		n.waitState("needs-config", "main", api.StateRunning)
		if out, err := n.oz("call", "needs-config__echo", "--arg", "text=x"); err != nil || strings.TrimSpace(out) != "x" {
			t.Errorf("once running: %v %q", err, out)
		}
	})

	t.Run("a host added that never answers", func(t *testing.T) {
		rs := startRemoteServers(t)
		n := newE2E(t, []string{"remote-mcp"}, "--backend", backends[0])
		n.stop()
		n.writeTenant("remote-a.test\n")
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead.Close() // nothing will ever answer here
		for _, kv := range []string{"api_key=" + remoteKey, "STREAM_PORT=" + port(rs.stream), "SSE_PORT=" + port(rs.sse), "DEAD_PORT=" + port(dead)} {
			if out, err := n.oz("plugin", "config", "remote-mcp", kv); err != nil {
				t.Fatalf("plugin config %s: %v\n%s", kv, err, out)
			}
		}
		n.startInHostsNamespace("127.0.0.1 localhost remote-a.test remote-b.test remote-c.test\n::1 localhost\n", "--backend", backends[0])
		n.waitState("remote-mcp", "stream", api.StateRunning)
		n.waitState("remote-mcp", "keyed", api.StateRefused)
		if out, err := n.oz("call", "remote-mcp__anything"); err == nil || !strings.Contains(out, "tenant's egress list") {
			t.Fatalf("before: %v\n%s", err, out)
		}
		n.writeTenant("remote-a.test\nremote-b.test\nremote-c.test\n")
		time.Sleep(200 * time.Millisecond) // the node reads the list within a few ms of its change
		out, _ := n.oz("call", "remote-mcp__anything")
		if strings.Contains(out, "tenant's egress list") {
			t.Errorf("after the hosts were added a call still answers the old refusal:\n%s", out)
		}
		if !strings.Contains(out, "remote-mcp/keyed") {
			t.Errorf("the call does not say why the server that never connects is not running:\n%s", out)
		}
		// Long after, the server that never connects is still not answered for
		// with the refusal the operator lifted.
		n.waitState("remote-mcp", "events", api.StateRunning)
		if out, _ := n.oz("call", "remote-mcp__anything"); strings.Contains(out, "tenant's egress list") || !strings.Contains(out, "remote-mcp/keyed") {
			t.Errorf("later, a call answers:\n%s", out)
		}
		// Its crash-loop finding names the cause that holds now too: the host is
		// allowed but does not answer — not a refusal by the tenant list.
		deadline := time.Now().Add(4 * time.Minute)
		for !n.hasFinding(api.CodeCrashLoop, "remote-mcp/keyed") {
			if time.Now().After(deadline) {
				t.Fatal("remote-mcp/keyed never reached a crash loop")
			}
			time.Sleep(time.Second)
		}
		for _, f := range n.status().Findings {
			if f.Code != api.CodeCrashLoop || f.Subject != "remote-mcp/keyed" {
				continue
			}
			_, cause, _ := strings.Cut(f.Message, "likely cause: ")
			if strings.Contains(cause, "egress refused remote-b.test") || !strings.Contains(cause, "egress to remote-b.test is allowed, but it could not be reached") {
				t.Errorf("the crash loop's cause is not what holds now:\n%s", f.Message)
			}
		}
	})
}
