package egress

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"oz0.ai/node/node/datadir"
)

// Endpoints are the one map from a plugin's server to its endpoint: what Set
// wants opens (a socket each, a host-loopback port where wanted, its credential
// the node key's), what it no longer wants closes, and Endpoint answers from the
// same map the proxy serves.
func TestEndpointsAreTheOneMapOfPorts(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(os.Geteuid() == 0); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{TenantListPath: d.TenantList(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e := NewEndpoints(p, d)
	if err := e.Set(PluginRules{Plugin: "demo"}, []Want{{}, {Server: "main", HostPort: true}}); err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"", "main"} {
		if _, err := os.Stat(SocketPath(d, "demo", server)); err != nil || !e.Open("demo", server) {
			t.Errorf("endpoint of %q: socket %v, open %v", server, err, e.Open("demo", server))
		}
	}
	if port, cred := e.Endpoint("demo", ""); port != 0 || cred != "" {
		t.Errorf("the plugin's own endpoint has port %d (credential %q); none was wanted", port, cred)
	}
	port, cred := e.Endpoint("demo", "main")
	want, err := NodeCredential(d, "demo", "main")
	if err != nil {
		t.Fatal(err)
	}
	if port == 0 || cred != want {
		t.Fatalf("server main: port %d, credential %q; want a port and the node key's credential %q", port, cred, want)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("server main's port %s does not answer: %v", addr, err)
	}
	c.Close()
	// No longer wanted with a port: the port closes and the map says so.
	if err := e.Set(PluginRules{Plugin: "demo"}, []Want{{}, {Server: "main"}}); err != nil {
		t.Fatal(err)
	}
	if port, cred := e.Endpoint("demo", "main"); port != 0 || cred != "" {
		t.Errorf("after the port is no longer wanted: port %d, credential %q", port, cred)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("server main's old port %s still answers", addr)
	}
	e.RemovePlugin("demo")
	if e.Open("demo", "") || e.Open("demo", "main") {
		t.Error("a removed plugin's endpoints are still in the map")
	}
}
