package daemon_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// On the loopback TCP door (--mcp-listen), a request naming a host that is not
// the loopback is refused on a warm session as on a new one (the SDK's guard
// against DNS rebinding): a web page's script that learned the token and a
// session id reaches no tool through the fast path either.
func TestCallerNonLoopbackHostOnTheTCPDoor(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	d, _ := datadir.New(dir + "/data")
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	installFixture(t, d, "unruly", 1)
	pn := plan.New(d, config.Run{Mode: policy.Off}, probe.Assume("linux", policy.BackendBwrap, false), nil)
	pn.Root = false
	const token = "attack-token"
	dm := daemon.New(daemon.Config{Node: pn, Version: "test", MCPListen: addr, Token: token})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dm.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
	})
	n := &node{d: d, dm: dm}
	waitFor(t, 10*time.Second, "control socket", func() bool {
		_, err := api.NewClient(d.Control()).Status(context.Background())
		return err == nil
	})
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	rh := newRawHTTP(t, http.DefaultClient, "http://"+addr+"/mcp", auth)
	for range 2 {
		if st, b, _ := rh.post(toolCall(1, "unruly__echo", map[string]any{"text": "ok"}), auth); st != http.StatusOK || !strings.Contains(string(b), `"ok"`) {
			t.Fatalf("a call with a loopback host: %d %s", st, b)
		}
	}
	for _, host := range []string{"evil.example", "evil.example:80", "127.0.0.1.evil.example", "10.0.0.1"} {
		st, b, _ := rh.post(toolCall(2, "unruly__echo", map[string]any{"text": "rebound"}), func(r *http.Request) { auth(r); r.Host = host })
		if st == http.StatusOK || strings.Contains(string(b), "rebound") {
			t.Errorf("Host %s: the call was answered: %d %s", host, st, b)
		}
	}
}
