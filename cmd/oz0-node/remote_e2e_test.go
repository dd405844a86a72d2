package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
)

// Remote MCP servers (type http and sse) run no plugin code: the node connects to
// them itself, through the same egress decision as a sandboxed server's own
// connections. Real go-sdk servers listen on loopback; the node runs in a private
// mount namespace whose /etc/hosts gives them names (remote-a.test…), with
// --egress-allow-cidr 127.0.0.0/8 opening loopback past the address guard.

type remoteServers struct {
	stream, sse net.Listener
	mu          sync.Mutex
	auth        []string // Authorization headers the streaming server saw
	// open counts the streaming server's open connections (the node's pool).
	open atomic.Int32
}

const remoteKey = "rk-77a1-REMOTE-SECRET"

func startRemoteServers(t *testing.T) *remoteServers {
	t.Helper()
	rs := &remoteServers{}
	newServer := func(name, tool, answer string) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: tool, Description: "answers " + answer}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answer}}}, nil, nil
		})
		return s
	}
	streamSrv := newServer("stream", "hello", "hello over streamable http")
	sseSrv := newServer("events", "ping", "pong over sse")
	// flood sends progress notifications as fast as it can for a while.
	type floodArgs struct {
		Seconds float64 `json:"seconds"`
	}
	mcp.AddTool(streamSrv, &mcp.Tool{Name: "flood", Description: "floods progress notifications"}, func(ctx context.Context, req *mcp.CallToolRequest, in floodArgs) (*mcp.CallToolResult, any, error) {
		sent := 0
		for end := time.Now().Add(time.Duration(in.Seconds * float64(time.Second))); time.Now().Before(end) && ctx.Err() == nil; sent++ {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "flood", Progress: float64(sent), Message: "still flooding"})
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent %d", sent)}}}, nil, nil
	})
	// big answers with a text of the given MiB: over the node's bound, it is to
	// become the call's error.
	type bigArgs struct {
		MiB int `json:"mib"`
	}
	big := func(ctx context.Context, req *mcp.CallToolRequest, in bigArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.MiB<<20)}}}, nil, nil
	}
	mcp.AddTool(streamSrv, &mcp.Tool{Name: "big", Description: "answers MiB of text"}, big)
	mcp.AddTool(sseSrv, &mcp.Tool{Name: "big_sse", Description: "answers MiB of text"}, big)
	jsonSrv := newServer("json", "json_hello", "hello in a JSON body")
	mcp.AddTool(jsonSrv, &mcp.Tool{Name: "big_json", Description: "answers MiB of text"}, big)
	// They stand in for hosts elsewhere, reached by name: the SDK's guard against
	// DNS rebinding on loopback servers would refuse those names.
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return streamSrv }, &mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	mux := http.NewServeMux()
	mux.Handle("/json", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return jsonSrv },
		&mcp.StreamableHTTPOptions{JSONResponse: true, DisableLocalhostProtection: true}))
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.auth = append(rs.auth, r.Header.Get("Authorization"))
		rs.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+remoteKey {
			http.Error(w, "missing bearer token", http.StatusUnauthorized)
			return
		}
		stream.ServeHTTP(w, r)
	}))
	var err error
	if rs.stream, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if rs.sse, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	hs1 := &http.Server{Handler: mux, ConnState: func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			rs.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			rs.open.Add(-1)
		}
	}}
	hs2 := &http.Server{Handler: mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return sseSrv }, &mcp.SSEOptions{DisableLocalhostProtection: true})}
	go hs1.Serve(rs.stream)
	go hs2.Serve(rs.sse)
	t.Cleanup(func() { hs1.Close(); hs2.Close() })
	return rs
}

func port(l net.Listener) string { return strconv.Itoa(l.Addr().(*net.TCPAddr).Port) }

// startInHostsNamespace restarts the node in a private mount namespace whose
// /etc/hosts names the loopback test servers.
func (n *e2eNode) startInHostsNamespace(hosts string, runArgs ...string) {
	n.t.Helper()
	f := filepath.Join(filepath.Dir(n.data), "hosts")
	if err := os.WriteFile(f, []byte(hosts), 0o644); err != nil {
		n.t.Fatal(err)
	}
	script := fmt.Sprintf("mount --bind %s /etc/hosts && exec %s --data-dir %s run --log-format text --egress-allow-cidr 127.0.0.0/8 %s",
		f, n.bin, n.data, strings.Join(runArgs, " "))
	n.startCommand(exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script))
}

func (n *e2eNode) writeTenant(list string) {
	n.t.Helper()
	tmp := filepath.Join(n.data, "tenant", ".egress.new")
	if err := os.WriteFile(tmp, []byte(list), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.data, "tenant", "egress")); err != nil {
		n.t.Fatal(err)
	}
}

func TestE2ERemoteServersThroughTheEgressDecision(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the private mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	backends := backendsForE2E(t)
	rs := startRemoteServers(t)
	n := newE2E(t, []string{"remote-mcp"}, "--backend", backends[0])
	n.stop()
	n.writeTenant("# test tenant list\nremote-a.test\nremote-b.test\n")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead.Close() // a port nothing answers on: the client's error quotes the URL
	for _, kv := range []string{"api_key=" + remoteKey, "STREAM_PORT=" + port(rs.stream), "SSE_PORT=" + port(rs.sse), "DEAD_PORT=" + port(dead)} {
		if out, err := n.oz("plugin", "config", "remote-mcp", kv); err != nil {
			t.Fatalf("plugin config %s: %v\n%s", kv, err, out)
		}
	}
	n.startInHostsNamespace("127.0.0.1 localhost remote-a.test remote-b.test remote-c.test\n::1 localhost\n", "--backend", backends[0])

	st := n.waitState("remote-mcp", "stream", api.StateRunning)
	if st.Remote != "http" || st.Host != "remote-a.test:"+port(rs.stream) || st.Sandbox != "none" {
		t.Errorf("stream in status: remote %q host %q sandbox %q", st.Remote, st.Host, st.Sandbox)
	}
	if se := n.waitState("remote-mcp", "events", api.StateRunning); se.Remote != "sse" {
		t.Errorf("events in status: remote %q", se.Remote)
	}
	el := n.waitState("remote-mcp", "elsewhere", api.StateRefused)
	if !strings.Contains(strings.Join(el.Reasons, " "), "tenant's egress list") {
		t.Errorf("elsewhere refused for %v, want the tenant list", el.Reasons)
	}
	found := false
	for _, f := range n.status().Findings {
		found = found || f.Code == api.CodeServerRefused && f.Subject == "remote-mcp/elsewhere" && strings.Contains(f.Message, "remote-c.test")
	}
	if !found {
		t.Errorf("no finding for the refused remote server: %+v", n.status().Findings)
	}

	// Tools are namespaced like any other server's, and answer through the node.
	for tool, want := range map[string]string{"remote-mcp__hello": "hello over streamable http", "remote-mcp__ping": "pong over sse"} {
		out, err := n.oz("call", tool)
		if err != nil || strings.TrimSpace(out) != want {
			t.Errorf("call %s: %v %q, want %q", tool, err, out, want)
		}
	}
	// A call of the refused server's tools answers why.
	out, err := n.oz("call", "remote-mcp__anything")
	if err == nil || !strings.Contains(out, "tenant's egress list") {
		t.Errorf("call of a refused remote server's tool: %v\n%s", err, out)
	}

	// The connections went through the proxy: audited and counted as the plugin's.
	audit, _ := os.ReadFile(filepath.Join(n.data, "logs", "audit.jsonl"))
	for _, want := range []string{`"remote-a.test"`, `"remote-b.test"`, `"server":"stream"`, `"server":"events"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log has no %s (each remote server speaks through its own endpoint):\n%s", want, audit)
		}
	}
	for _, p := range n.status().Plugins {
		if p.Name == "remote-mcp" && p.Allowed == 0 {
			t.Errorf("remote-mcp egress allowed count is 0")
		}
	}
	// The header carried the operator's value, and nothing prints it.
	rs.mu.Lock()
	sawKey := strings.Join(rs.auth, ",")
	rs.mu.Unlock()
	if !strings.Contains(sawKey, "Bearer "+remoteKey) {
		t.Errorf("the streaming server never saw the bearer token: %q", sawKey)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"plugin", "show", "remote-mcp"}, {"plugin", "show", "remote-mcp", "--json"}, {"plugin", "config", "remote-mcp", "--json"}} {
		out, _ := n.oz(args...)
		if strings.Contains(out, remoteKey) {
			t.Errorf("oz0-node %s shows the key:\n%s", strings.Join(args, " "), out)
		}
	}
	if show, _ := n.oz("plugin", "show", "remote-mcp"); !strings.Contains(show, "remote http at remote-a.test:"+port(rs.stream)) {
		t.Errorf("plugin show does not show the remote server with its host:\n%s", show)
	}
	if strings.Contains(n.log.String(), remoteKey) || strings.Contains(string(audit), remoteKey) {
		t.Errorf("the node's log or audit holds the key")
	}

	// A server that cannot be reached: its error, in status and the log, quotes its
	// URL, which carries the key; that is redacted.
	ks := n.waitState("remote-mcp", "keyed", api.StateBackingOff, api.StateCrashed)
	if !strings.Contains(strings.Join(ks.LastErr, " "), "[redacted]") {
		t.Errorf("keyed's error does not show the URL redacted: %v", ks.LastErr)
	}
	for _, args := range [][]string{{"status", "--json"}, {"findings", "--json"}} {
		if out, _ := n.oz(args...); strings.Contains(out, remoteKey) {
			t.Errorf("oz0-node %s shows the key of an unreachable server:\n%s", strings.Join(args, " "), out)
		}
	}
	if strings.Contains(n.log.String(), remoteKey) {
		t.Errorf("the node's log holds the key")
	}

	// The tenant's list is live: listing the third host starts its server.
	n.writeTenant("remote-a.test\nremote-b.test\nremote-c.test\n")
	n.waitState("remote-mcp", "elsewhere", api.StateRunning)
	// And taking a host off stops it again: a call answers why.
	n.writeTenant("remote-b.test\n")
	n.waitState("remote-mcp", "stream", api.StateRefused)
	out, err = n.oz("call", "remote-mcp__hello")
	if err == nil || !strings.Contains(out, "tenant's egress list") {
		t.Errorf("call after the host left the tenant list: %v\n%s", err, out)
	}
}
