package daemon_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/policy"
)

// Abandoned sessions on the HTTP door stay under the node's cap: past it the
// session idle longest is closed (its next request is refused), the newest and
// a session with a request in flight stay, and the cap's finding says so.
func TestAbandonedSessionsStayUnderTheCap(t *testing.T) {
	n := startRun(t, config.Run{Mode: policy.Strict, SessionCap: 20, SessionCapPerClient: 20}, 0, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	first := n.rawHTTPSession(t)
	var last *rawHTTP
	for range 200 {
		last = n.rawHTTPSession(t)
	}
	open := 0
	for ss := range n.dm.Gateway().Server().Sessions() {
		if ss.ID() != "" {
			open++
		}
	}
	if open > 20 {
		t.Errorf("%d HTTP sessions open after 201 were made; the cap is 20", open)
	}
	if st, _, _ := first.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil); st == http.StatusOK {
		t.Error("the session idle longest still answers: it was not closed")
	}
	if st, b, _ := last.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil); st != http.StatusOK {
		t.Errorf("the newest session was closed: %d %s", st, b)
	}
	found := false
	for _, f := range n.status(t).Findings {
		found = found || f.Code == api.CodeSessionCap
	}
	if !found {
		t.Error("no session-cap finding")
	}
}

// A client past its own cap loses its own session idle longest, not another
// client's; on the stdio door each connection is a session and a closed one
// ends its connection.
func TestStdioSessionsPerClientCap(t *testing.T) {
	n := startRun(t, config.Run{Mode: policy.Strict, SessionCap: 100, SessionCapPerClient: 5}, 0, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	var conns []net.Conn
	for range 8 {
		c, err := net.Dial("unix", n.d.MCPStdio())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}` + "\n"))
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatalf("initialize: %v", err)
		}
		conns = append(conns, c)
		time.Sleep(5 * time.Millisecond)
	}
	ended := 0
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		if err != nil && !strings.Contains(err.Error(), "timeout") {
			ended++
			if i >= 3 {
				t.Errorf("connection %d (one of the 5 newest) was closed", i)
			}
		}
	}
	if ended != 3 {
		t.Errorf("%d of 8 connections of one client ended; its cap is 5", ended)
	}
}
