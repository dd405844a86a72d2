package bench

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/manifest"
)

// connectStatus opens a CONNECT through the proxy and returns the status code.
// benchCredential is what the bench plugin's host-loopback endpoint requires.
const benchCredential = "bench-credential-0123456789abcdef0123456789"

func connectStatus(proxy netip.AddrPort, target string) int {
	c, err := net.DialTimeout("tcp", proxy.String(), time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n",
		target, target, base64.StdEncoding.EncodeToString([]byte("oz0:"+benchCredential)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	return resp.StatusCode
}

// BenchmarkTenantListReload measures the time from an atomic rewrite of the tenant
// list (an editor's rename write) that drops a host to the proxy refusing it.
func BenchmarkTenantListReload(b *testing.B) {
	dir := b.TempDir()
	d, _ := datadir.New(dir)
	d.Create(false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	write := func(list string) {
		tmp := filepath.Join(dir, "tenant", ".egress.new")
		os.WriteFile(tmp, []byte(list), 0o644)
		os.Rename(tmp, d.TenantList())
	}
	write("api.example.com\n")
	p, err := egress.New(egress.Config{
		TenantListPath: d.TenantList(),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		AllowCIDRs:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ep, err := p.AddPlugin(egress.PluginRules{Plugin: "bench", Egress: []manifest.EgressEntry{{Host: "api.example.com"}}}, egress.Listen{TCP: true, Credential: benchCredential})
	if err != nil {
		b.Fatal(err)
	}
	target := fmt.Sprintf("api.example.com:%d", port)
	var lat latencies
	for i := 0; i < b.N; i++ {
		write("api.example.com\n")
		deadline := time.Now().Add(5 * time.Second)
		for connectStatus(ep.TCP, target) != 200 {
			if time.Now().After(deadline) {
				b.Fatal("host never allowed")
			}
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		write("# emptied\n")
		for connectStatus(ep.TCP, target) != 403 {
			if time.Since(t0) > 5*time.Second {
				b.Fatal("host never refused after removal")
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat.add(time.Since(t0))
	}
	lat.report(b)
}
