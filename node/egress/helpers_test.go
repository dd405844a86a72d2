package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init() // first: the bridge's own environment names the test tool too
	if os.Getenv(testToolEnv) != "" {
		os.Exit(testTool())
	}
	os.Exit(m.Run())
}

// Test names. Everything resolves to loopback through the test resolver; nothing
// in these tests touches real DNS or a non-loopback address.
const (
	hostBoth     = "api.example.com"      // in the manifest and the tenant list
	hostManifest = "manifest.example.com" // manifest only
	hostTenant   = "tenant.example.com"   // tenant list only
	hostPrivate  = "private.example.com"  // both lists, resolves to 10.0.0.1
	hostMeta     = "meta.example.com"     // both lists, resolves to 169.254.169.254
	hostMixed    = "mixed.example.com"    // both lists, resolves to 127.0.0.1 and 10.1.2.3
	hostOther    = "other.example.com"    // in both lists
)

var testManifest = []manifest.EgressEntry{
	{Host: hostBoth, Reason: "test"}, {Host: hostManifest}, {Host: hostPrivate}, {Host: hostMeta}, {Host: hostMixed}, {Host: hostOther},
}

const testTenant = "# tenant list\n" + hostBoth + "\n" + hostTenant + "  # trailing comment\n" + hostPrivate + "\n" + hostMeta + "\n" + hostMixed + "\n" + hostOther + "\n"

func testResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case hostPrivate:
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	case hostMeta:
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	case hostMixed:
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")}, nil
	}
	if strings.HasSuffix(host, ".example.com") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

type fixture struct {
	p      *Proxy
	dir    string
	tenant string
	audit  string
	ep     Endpoint
}

// testCredential is plugin alpha's credential on its TCP endpoint in the fixture;
// testAuthHeader presents it (the unix socket ignores it, as it needs none).
const testCredential = "0123456789abcdef0123456789abcdef-alpha"

var testAuthHeader = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("oz0:"+testCredential)) + "\r\n"

// newFixture starts a proxy for plugin "alpha" with a unix socket and a TCP
// endpoint (which requires testCredential). allowLoopback opens 127.0.0.0/8 (as --egress-allow-cidr would) so the
// test servers can be reached by name.
func newFixture(t testing.TB, allowLoopback bool, mod func(*Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, tenant: filepath.Join(dir, "tenant", "egress"), audit: filepath.Join(dir, "logs", "audit.jsonl")}
	if err := os.MkdirAll(filepath.Dir(f.tenant), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTenant(t, f.tenant, testTenant)
	cfg := Config{
		TenantListPath: f.tenant, AuditPath: f.audit, Resolver: testResolver,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if allowLoopback {
		cfg.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	t.Cleanup(func() { p.Close() })
	f.ep, err = p.AddPlugin(PluginRules{Plugin: "alpha", Egress: testManifest},
		Listen{Socket: filepath.Join(dir, "run", "egress", "alpha", "egress.sock"), TCP: true, Credential: testCredential})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// writeTenant replaces the list the way editors do: a temp file renamed over it.
func writeTenant(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) dialUnix(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", f.ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// raw sends bytes exactly as given and reads one HTTP response.
func raw(t testing.TB, c net.Conn, req string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request %q: %v", firstLine(req), err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func firstLine(s string) string {
	if i := strings.Index(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// client is an HTTP client that goes through the proxy's unix socket (unix=true)
// or its TCP port, trusting httptest's certificate.
func (f *fixture) client(unix bool, tlsServer *httptest.Server) *http.Client {
	roots := x509.NewCertPool()
	if tlsServer != nil {
		roots.AddCert(tlsServer.Certificate())
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}
	if unix {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:1"})
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.ep.Socket)
		}
	} else {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword("oz0", testCredential), Host: f.ep.TCP.String()})
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// hostURL rewrites a test server URL to a test name on the same port.
func hostURL(ts *httptest.Server, host string) string {
	u, _ := url.Parse(ts.URL)
	return u.Scheme + "://" + host + ":" + u.Port()
}

func port(ts *httptest.Server) string {
	u, _ := url.Parse(ts.URL)
	return u.Port()
}

// readAudit closes the proxy (flushing the log) and returns its records.
func (f *fixture) readAudit(t testing.TB) []api.EgressDecision {
	t.Helper()
	f.p.Close()
	b, err := os.ReadFile(f.audit)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.EgressDecision
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r api.AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if r.Kind == "egress" {
			out = append(out, api.EgressDecision{Time: r.Time, Plugin: r.Plugin, Server: r.Server, Host: r.Host, Port: r.Port,
				Addr: r.Addr, Decision: r.Decision, Rule: r.Rule, Bytes: r.Bytes, Seconds: r.Seconds})
		}
	}
	return out
}

// eventually polls cond every 2 ms up to d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// loopbackServer accepts on 127.0.0.1 until the test ends and runs handle for each
// connection in a goroutine of its own, closing the connection after it.
func loopbackServer(t testing.TB, handle func(c net.Conn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// echoServer echoes each connection until EOF, then half-closes and closes.
func echoServer(t testing.TB) (addr netip.AddrPort) {
	t.Helper()
	return loopbackServer(t, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
}

// connectTo opens a CONNECT tunnel through conn and checks the 200.
func connectTo(t testing.TB, c net.Conn, authority string) *bufio.Reader {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", authority, authority, testAuthHeader)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("CONNECT %s: %s %s", authority, resp.Status, b)
	}
	c.SetDeadline(time.Time{})
	return br
}

// streamServer writes data to every connection until the peer goes away.
func streamServer(t testing.TB) netip.AddrPort {
	t.Helper()
	return loopbackServer(t, func(c net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
}
