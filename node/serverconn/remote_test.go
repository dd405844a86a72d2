package serverconn

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/manifest"
)

// proxyFor runs a real egress proxy for plugin "p" that allows a.test and b.test
// (both on loopback, by a test resolver) and returns its socket.
func proxyFor(t *testing.T, allowLoopback bool) string {
	t.Helper()
	dir := t.TempDir()
	tenant := filepath.Join(dir, "tenant")
	os.WriteFile(tenant, []byte("a.test\nb.test\n"), 0o644)
	cfg := egress.Config{TenantListPath: tenant, AuditPath: filepath.Join(dir, "audit.jsonl"),
		Resolver: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}}
	if allowLoopback {
		cfg.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sock := filepath.Join(dir, "egress.sock")
	rules := egress.PluginRules{Plugin: "p", Egress: []manifest.EgressEntry{{Host: "a.test"}, {Host: "b.test"}}}
	if _, err := p.AddPlugin(rules, egress.Listen{Socket: sock}); err != nil {
		t.Fatal(err)
	}
	return sock
}

func portOf(ts *httptest.Server) string { return ts.URL[strings.LastIndex(ts.URL, ":")+1:] }

// A remote server that redirects elsewhere does not get the node to carry its
// headers (the operator's secrets) to the other host: redirects are not followed.
func TestRemoteClientNeverFollowsARedirectWithTheHeaders(t *testing.T) {
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
	}))
	defer other.Close()
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, "http://b.test:"+portOf(other)+"/collect", http.StatusTemporaryRedirect)
	}))
	defer remote.Close()
	hc := RemoteClient(proxyFor(t, true), map[string]string{"Authorization": "Bearer k"}, Limits{})
	resp, err := hc.Post("http://a.test:"+portOf(remote)+"/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("status %d, want the redirect itself (the header check passed through the proxy)", resp.StatusCode)
	}
	if v := leaked.Load(); v != nil {
		t.Errorf("the other host was reached (Authorization %q)", v)
	}
}

// Every address a remote server's name resolves to is checked when dialled: a name
// on loopback is refused unless the operator opened that range.
func TestRemoteClientDialsOnlyWhatTheAddressGuardAllows(t *testing.T) {
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") }))
	defer remote.Close()
	hc := RemoteClient(proxyFor(t, false), nil, Limits{})
	_, err := hc.Get("http://a.test:" + portOf(remote) + "/")
	var ref *EgressRefusal
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || !strings.Contains(ref.Why, "address guard") {
		t.Fatalf("err %v, want the proxy's address-guard refusal", err)
	}
	// A host on no list is refused by the lists.
	hc = RemoteClient(proxyFor(t, true), nil, Limits{})
	_, err = hc.Get("http://c.test:" + portOf(remote) + "/")
	if !errors.As(err, &ref) || !strings.Contains(ref.Why, "manifest") {
		t.Fatalf("err %v, want the lists' refusal", err)
	}
	resp, err := hc.Get("http://a.test:" + portOf(remote) + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "reached" {
		t.Errorf("allowed host answered %q", b)
	}
}
