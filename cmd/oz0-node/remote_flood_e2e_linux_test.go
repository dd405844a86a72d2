package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// A remote server flooding notifications has them dropped over its rate, as a
// local server's are: status counts the drops with a finding, and another
// server's calls keep their latency.
func TestE2ERemoteNotificationFloodIsBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the private mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	backends := backendsForE2E(t)
	rs := startRemoteServers(t)
	n := newE2E(t, []string{"remote-mcp", "demo"}, "--backend", backends[0])
	n.stop()
	n.writeTenant("remote-a.test\nremote-b.test\n")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	for _, kv := range []string{"api_key=" + remoteKey, "STREAM_PORT=" + port(rs.stream), "SSE_PORT=" + port(rs.sse), "DEAD_PORT=" + port(dead)} {
		if out, err := n.oz("plugin", "config", "remote-mcp", kv); err != nil {
			t.Fatalf("plugin config %s: %v\n%s", kv, err, out)
		}
	}
	n.startInHostsNamespace("127.0.0.1 localhost remote-a.test remote-b.test remote-c.test\n::1 localhost\n", "--backend", backends[0])
	n.waitState("remote-mcp", "stream", api.StateRunning)
	n.waitState("demo", "main", api.StateRunning)

	cs := n.mcpClient(t, nil)
	// n.cmd is the node itself: unshare and sh exec it.
	quiet, loud, cores, sent := echoDuringFlood(t, n, cs, "remote-mcp__flood", "--arg", "seconds=6")

	med := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	t.Logf("demo__echo latency: quiet median %v, during the remote flood median %v; node CPU during the flood %.2f cores; flood: %s", med(quiet), med(loud), cores, strings.TrimSpace(sent))
	if !strings.Contains(sent, "sent ") {
		t.Fatalf("the flood call failed: %s", sent)
	}
	if med(loud) > 2*med(quiet)+5*time.Millisecond {
		t.Errorf("a call on another server took %v during the flood (median; %v quiet)", med(loud), med(quiet))
	}
	if cores > 0.5 {
		t.Errorf("the node used %.2f cores while a remote server flooded notifications", cores)
	}
	dropped := n.notesDropped("remote-mcp", "stream")
	t.Logf("remote-mcp/stream notifications dropped: %d", dropped)
	if dropped == 0 {
		t.Errorf("status counts no dropped notifications for remote-mcp/stream")
	}
	if !n.hasFinding(api.CodeNotificationFlood, "remote-mcp/stream") {
		t.Errorf("no %s finding for remote-mcp/stream", api.CodeNotificationFlood)
	}
	// Operators who scrape see the same count (it may have grown since).
	fams := scrape(t, filepath.Join(n.data, "run", "control.sock"), "")
	if v := value(fams, "oz0_server_notifications_dropped_total", map[string]string{"plugin": "remote-mcp", "server": "stream"}); v < float64(dropped) || v == 0 {
		t.Errorf("oz0_server_notifications_dropped_total{remote-mcp,stream} = %v, want at least status's %d", v, dropped)
	}
	// The server's own calls go on after its flood.
	if out, err := n.oz("call", "remote-mcp__hello"); err != nil || strings.TrimSpace(out) != "hello over streamable http" {
		t.Errorf("hello on the flooding server after its flood: %v %q", err, out)
	}
}
