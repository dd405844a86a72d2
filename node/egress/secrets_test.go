package egress

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/internal/syncbuf"
	"oz0.ai/node/node/api"
)

// Secrets stay outside the sandbox (docs/promises.md §17): these tests drive the
// real proxy on loopback with a test CA as the upstream hosts' issuer, trusted
// by the proxy as its roots, and clients that trust the node's CA.

const (
	testSecret      = "sk-live-REAL-6f1d2c9a"
	testOtherSecret = "other-REAL-77ab"
)

// testCA is an issuer for the loopback test hosts.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) issue(t testing.TB, hosts ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: hosts[0]},
		DNSNames: hosts, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// seen is one request as an upstream test host got it.
type seen struct {
	Proto  string
	Host   string
	Header http.Header
	Query  string
	Body   string
}

// upstream is a loopback test host that records what arrives and answers with
// the request's Authorization header echoed (as an API's error might).
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	got  []seen
	http bool
}

func newUpstream(t testing.TB, cert *tls.Certificate, h2 bool) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, seen{Proto: r.Proto, Host: r.Host, Header: r.Header.Clone(), Query: r.URL.RawQuery, Body: string(b)})
		u.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
	}))
	if cert != nil {
		u.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		u.EnableHTTP2 = h2
		u.StartTLS()
	} else {
		u.http = true
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.got...)
}

type secretsFixture struct {
	*fixture
	nodeCA   *CA
	sentinel string // token's, bound to api.example.com only
	other    string // other's, bound to other.example.com only
	log      *syncbuf.Buffer
}

// newSecretsFixture is the fixture's proxy with the node's CA, the test CA as
// its upstream roots, and plugin alpha's own endpoint holding two secrets.
func newSecretsFixture(t testing.TB, upstreamCA *testCA) *secretsFixture {
	t.Helper()
	ca, err := LoadCA(filepath.Join(t.TempDir(), "egress-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	log := &syncbuf.Buffer{}
	f := newFixture(t, true, func(c *Config) {
		c.CA, c.UpstreamRoots = ca, upstreamCA.pool()
		c.Logger = slog.New(slog.NewTextHandler(log, nil))
	})
	sf := &secretsFixture{fixture: f, nodeCA: ca, log: log,
		sentinel: Sentinel("alpha", "", "token"), other: Sentinel("alpha", "", "other")}
	err = f.p.UpdatePlugin(PluginRules{Plugin: "alpha", Egress: testManifest, Secrets: []Secret{
		{Key: "token", Sentinel: sf.sentinel, Value: testSecret, Hosts: []string{hostBoth}},
		{Key: "other", Sentinel: sf.other, Value: testOtherSecret, Hosts: []string{hostOther}, Body: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return sf
}

// client goes through alpha's endpoint, trusting the node's CA (as a sandbox of
// a plugin with secrets does) and, for hosts not intercepted, the test CA.
func (sf *secretsFixture) client(t testing.TB, h2 bool, extra ...*x509.Certificate) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(sf.nodeCA.Certificate())
	for _, c := range extra {
		roots.AddCert(c)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:1"}),
		DisableKeepAlives: true,
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sf.ep.Socket)
		},
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// A request from a sandbox carries the sentinel; the bound host gets the real
// value in Authorization (Bearer and Basic) and in the query, over HTTP/1.1 and
// h2 on both sides; the client never sees the value, even when the host echoes
// it; a request without a sentinel passes untouched.
func TestSecretPutInOnlyForItsBoundHost(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	for _, tc := range []struct {
		name             string
		clientH2, hostH2 bool
	}{{"http1-http1", false, false}, {"h2-h2", true, true}, {"h2-http1", true, false}, {"http1-h2", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cert := upCA.issue(t, hostBoth)
			up := newUpstream(t, &cert, tc.hostH2)
			c := sf.client(t, tc.clientH2)
			base := hostURL(up.Server, hostBoth)
			resp, body := do(t, c, "POST", base+"/v1/x?key="+sf.sentinel+"&q=1", "body keeps "+sf.sentinel,
				map[string]string{"Authorization": "Bearer " + sf.sentinel, "X-Plain": "untouched"})
			if resp.StatusCode != 200 {
				t.Fatalf("status %s: %s", resp.Status, body)
			}
			wantProto := map[bool]int{false: 1, true: 2}
			if resp.ProtoMajor != wantProto[tc.clientH2] {
				t.Errorf("client spoke %s, want HTTP/%d (ALPN)", resp.Proto, wantProto[tc.clientH2])
			}
			got := up.requests()
			if len(got) != 1 {
				t.Fatalf("upstream got %d requests", len(got))
			}
			r := got[0]
			if r.Header.Get("Authorization") != "Bearer "+testSecret {
				t.Errorf("upstream Authorization %q, want the real secret", r.Header.Get("Authorization"))
			}
			if r.Query != "key="+url.QueryEscape(testSecret)+"&q=1" {
				t.Errorf("upstream query %q", r.Query)
			}
			if r.Body != "body keeps "+sf.sentinel {
				t.Errorf("body %q: a secret without body: true must not be put in the body", r.Body)
			}
			if r.Header.Get("X-Plain") != "untouched" {
				t.Errorf("other header %q", r.Header.Get("X-Plain"))
			}
			if wantProto[tc.hostH2] != map[string]int{"HTTP/1.1": 1, "HTTP/2.0": 2}[r.Proto] {
				t.Errorf("upstream got %s, want HTTP/%d", r.Proto, wantProto[tc.hostH2])
			}
			// The host echoes the credential: the sandbox sees the sentinel.
			if strings.Contains(body, testSecret) || strings.Contains(resp.Header.Get("X-Echo"), testSecret) {
				t.Errorf("the response hands the secret to the client: %q %q", body, resp.Header.Get("X-Echo"))
			}
			if body != "auth=Bearer "+sf.sentinel {
				t.Errorf("echoed body %q, want the sentinel back", body)
			}

			// Basic credentials: the sentinel as the password.
			basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+sf.sentinel))
			do(t, c, "GET", base+"/basic", "", map[string]string{"Authorization": basic})
			got = up.requests()
			if dec, _ := basicDecoded(got[1].Header.Get("Authorization")); dec != "user:"+testSecret {
				t.Errorf("Basic credentials upstream %q", dec)
			}

			// No sentinel: untouched.
			do(t, c, "PUT", base+"/plain?a=b%20c", "payload", map[string]string{"Authorization": "Bearer mine", "X-Forwarded-For": "1.2.3.4"})
			r = up.requests()[2]
			if r.Header.Get("Authorization") != "Bearer mine" || r.Query != "a=b%20c" || r.Body != "payload" ||
				r.Header.Get("X-Forwarded-For") != "1.2.3.4" || r.Host != hostBoth+":"+port(up.Server) {
				t.Errorf("a request without a sentinel was changed: %+v", r)
			}
		})
	}
	for _, d := range sf.readAudit(t) {
		if strings.Contains(fmt.Sprint(d), testSecret) {
			t.Errorf("audit line holds the secret: %+v", d)
		}
	}
	if strings.Contains(sf.log.String(), testSecret) {
		t.Errorf("the proxy's log holds the secret")
	}
}

// The same sentinel sent to another allowed host is refused, audited and raised
// as a finding: over TLS to a host another secret is bound to (intercepted),
// over plain HTTP to any host, and in a CONNECT's target or headers. The host
// never sees a request.
func TestSentinelSentElsewhereIsRefusedAndReported(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	cert := upCA.issue(t, hostOther)
	otherTLS := newUpstream(t, &cert, true)
	otherPlain := newUpstream(t, nil, false)
	c := sf.client(t, true)

	resp, body := do(t, c, "GET", hostURL(otherTLS.Server, hostOther)+"/steal?k="+sf.sentinel, "", nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "token") {
		t.Errorf("TLS to %s with token's sentinel: %s %q, want 403 naming the secret", hostOther, resp.Status, body)
	}
	resp, body = do(t, c, "GET", hostURL(otherPlain.Server, hostOther)+"/steal", "", map[string]string{"X-Key": sf.sentinel})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("plain HTTP to %s with token's sentinel: %s %q, want 403", hostOther, resp.Status, body)
	}
	// Basic credentials hide it from a plain look.
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(sf.sentinel+":x"))
	resp, _ = do(t, c, "GET", hostURL(otherPlain.Server, hostOther)+"/steal", "", map[string]string{"Authorization": basic})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Basic credentials holding the sentinel: %s, want 403", resp.Status)
	}
	// other's sentinel is bound to other.example.com: it goes in there.
	resp, _ = do(t, c, "GET", hostURL(otherTLS.Server, hostOther)+"/ok", "", map[string]string{"Authorization": "Bearer " + sf.other})
	if resp.StatusCode != 200 {
		t.Errorf("other's own host: %s", resp.Status)
	}
	if got := otherTLS.requests(); len(got) != 1 || got[0].Header.Get("Authorization") != "Bearer "+testOtherSecret {
		t.Errorf("other's host got %+v, want one request with other's value", got)
	}
	if got := otherPlain.requests(); len(got) != 0 {
		t.Errorf("a refused request reached the host: %+v", got)
	}

	// The target itself, or the CONNECT's headers.
	conn := sf.dialUnix(t)
	r, _ := raw(t, conn, "CONNECT "+sf.sentinel+".example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
	if r.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT to a name holding the sentinel: %s", r.Status)
	}
	conn = sf.dialUnix(t)
	r, _ = raw(t, conn, "CONNECT "+hostOther+":443 HTTP/1.1\r\nHost: x\r\nX-Leak: "+sf.sentinel+"\r\n\r\n")
	if r.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT with the sentinel in a header: %s", r.Status)
	}

	var found *api.Finding
	for _, f := range sf.p.Findings() {
		if f.Code == api.CodeSecretSentElsewhere && f.Subject == "alpha" {
			found = &f
		}
	}
	if found == nil || !strings.Contains(found.Message, "token") || !strings.Contains(found.Message, hostOther) || strings.Contains(found.Message, testSecret) {
		t.Errorf("finding %+v, want secret-sent-elsewhere naming token and %s", found, hostOther)
	}
	denials := 0
	for _, d := range sf.readAudit(t) {
		if strings.Contains(fmt.Sprint(d), testSecret) || strings.Contains(fmt.Sprint(d), testOtherSecret) {
			t.Errorf("audit line holds a secret: %+v", d)
		}
		if d.Decision == "deny" && strings.HasPrefix(d.Rule, "secret token") {
			denials++
		}
	}
	if denials < 5 {
		t.Errorf("%d audited refusals of token's sentinel, want 5", denials)
	}
}

// A host no secret is bound to stays a plain tunnel: the client sees the host's
// own certificate, not one the node minted.
func TestHostWithoutSecretsStaysAPlainTunnel(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	cert := upCA.issue(t, hostManifest)
	up := newUpstream(t, &cert, true)
	var issuer string
	c := sf.client(t, true, upCA.cert)
	c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		issuer = cs.PeerCertificates[0].Issuer.CommonName
		return nil
	}
	if err := os.WriteFile(sf.tenant, []byte(testTenant+hostManifest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "tenant list reload", func() bool {
		resp, err := c.Get(hostURL(up.Server, hostManifest) + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	if issuer != "test upstream CA" {
		t.Errorf("the client saw a certificate issued by %q: a host without secrets was intercepted", issuer)
	}
}

// The upstream is verified against the node's roots: a bound host whose
// certificate the node does not trust gets no request, and so no secret.
func TestInterceptedUpstreamIsVerified(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	rogue := newTestCA(t, "rogue CA")
	cert := rogue.issue(t, hostBoth)
	up := newUpstream(t, &cert, true)
	resp, body := do(t, sf.client(t, true), "GET", hostURL(up.Server, hostBoth)+"/", "", map[string]string{"Authorization": "Bearer " + sf.sentinel})
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "not trusted") {
		t.Errorf("untrusted upstream: %s %q, want 502 saying why", resp.Status, body)
	}
	if got := up.requests(); len(got) != 0 {
		t.Errorf("the secret went to a host the node does not trust: %+v", got)
	}
}

// A request for another host on a connection to a bound one (a shared front
// end) is not sent: the secret would follow it.
func TestMisdirectedRequestOnInterceptedConnection(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	cert := upCA.issue(t, hostBoth)
	up := newUpstream(t, &cert, false)
	conn := sf.dialUnix(t)
	br := connectTo(t, conn, hostBoth+":"+port(up.Server))
	roots := x509.NewCertPool()
	roots.AddCert(sf.nodeCA.Certificate())
	tc := tls.Client(&readerConn{Conn: conn, r: br}, &tls.Config{ServerName: hostBoth, RootCAs: roots})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: evil.example.org\r\nAuthorization: Bearer %s\r\n\r\n", sf.sentinel)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("status %s, want 421", resp.Status)
	}
	if got := up.requests(); len(got) != 0 {
		t.Errorf("a misdirected request was sent: %+v", got)
	}
}

// body: true puts the secret in request bodies too, on its bound host only.
func TestSecretInTheBodyOnlyWhenAsked(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	cert := upCA.issue(t, hostOther)
	up := newUpstream(t, &cert, true)
	payload, _ := json.Marshal(map[string]string{"api_key": sf.other})
	do(t, sf.client(t, false), "POST", hostURL(up.Server, hostOther)+"/", string(payload), nil)
	got := up.requests()
	if len(got) != 1 || !strings.Contains(got[0].Body, testOtherSecret) || strings.Contains(got[0].Body, sf.other) {
		t.Errorf("upstream body %+v, want the real value in place of the sentinel", got)
	}
}

// Replacement across reads: a value split over the boundary of two reads is
// still replaced, and nothing else changes.
func TestReplaceReaderAcrossReads(t *testing.T) {
	old, new := []byte("SENTINEL-abcdef"), []byte("v")
	src := strings.Repeat("x", 100) + "SENTINEL-abcdef" + "y" + "SENTINEL-abc"
	for chunk := 1; chunk < 20; chunk++ {
		r := &replaceReader{src: &chunked{b: []byte(src), n: chunk}, old: [][]byte{old}, new: [][]byte{new}}
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Repeat("x", 100) + "v" + "y" + "SENTINEL-abc"
		if string(got) != want {
			t.Errorf("chunk %d: %q", chunk, got)
		}
	}
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// A value a tool had put somewhere on the bound host comes back, on any later
// request, as the sentinel: in headers, plain bodies and gzip bodies (decoded to
// be checked). A request that carries a secret asks only for encodings the proxy
// reads; a body in another is refused rather than passed unchecked.
func TestBoundHostNeverHandsTheValueBack(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	cert := upCA.issue(t, hostBoth)
	var asked []string
	var mu sync.Mutex
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("X-Stored", "key="+testSecret)
		switch r.URL.Path {
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "stored: %s", testSecret)
			zw.Close()
		case "/br":
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "opaque "+testSecret)
		default:
			fmt.Fprintf(w, "stored: %s", testSecret)
		}
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	up.StartTLS()
	t.Cleanup(up.Close)
	c := sf.client(t, false)
	c.Transport.(*http.Transport).DisableCompression = true
	base := hostURL(up, hostBoth)
	for _, path := range []string{"/plain", "/gzip"} {
		resp, body := do(t, c, "GET", base+path, "", map[string]string{"Accept-Encoding": "gzip"})
		if resp.StatusCode != 200 || body != "stored: "+sf.sentinel || resp.Header.Get("X-Stored") != "key="+sf.sentinel || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: %s %q X-Stored %q encoding %q: want the sentinel, decoded", path, resp.Status, body, resp.Header.Get("X-Stored"), resp.Header.Get("Content-Encoding"))
		}
	}
	resp, body := do(t, c, "GET", base+"/br", "", map[string]string{"Accept-Encoding": "br, gzip;q=0.5", "Authorization": "Bearer " + sf.sentinel})
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, testSecret) {
		t.Errorf("an unreadable body answering a request with the secret: %s %q, want 502", resp.Status, body)
	}
	mu.Lock()
	if last := asked[len(asked)-1]; last != "gzip;q=0.5" {
		t.Errorf("a request carrying the secret asked for %q, want only what the proxy reads", last)
	}
	if asked[0] != "gzip" {
		t.Errorf("a request without a secret had its Accept-Encoding changed: %q", asked[0])
	}
	mu.Unlock()
}

// A sentinel is put in only on its own server's endpoint: the same sentinel
// from another server of the plugin is refused and reported.
func TestSentinelOnAnotherServersEndpointIsRefused(t *testing.T) {
	upCA := newTestCA(t, "test upstream CA")
	sf := newSecretsFixture(t, upCA)
	sock := filepath.Join(sf.dir, "run", "egress", "alpha", "srv2", "egress.sock")
	if _, err := sf.p.AddPlugin(PluginRules{Plugin: "alpha", Egress: testManifest, Secrets: []Secret{
		{Key: "token", Sentinel: sf.sentinel, Value: testSecret, Hosts: []string{hostBoth}},
	}}, Listen{Socket: sock, Server: "second"}); err != nil {
		t.Fatal(err)
	}
	cert := upCA.issue(t, hostBoth)
	up := newUpstream(t, &cert, false)
	c := sf.client(t, false, upCA.cert)
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	resp, body := do(t, c, "GET", hostURL(up.Server, hostBoth)+"/", "", map[string]string{"Authorization": "Bearer " + sf.sentinel})
	// Server "second" has no secret bound to the host: a plain tunnel, so the
	// client meets the host itself, and the sentinel goes as it is, worthless.
	if resp.StatusCode != 200 || body != "auth=Bearer "+sf.sentinel {
		t.Errorf("over a plain tunnel: %s %q", resp.Status, body)
	}
	// Over plain HTTP the proxy reads the request: refused and reported.
	plain := newUpstream(t, nil, false)
	resp, _ = do(t, c, "GET", hostURL(plain.Server, hostBoth)+"/", "", map[string]string{"Authorization": "Bearer " + sf.sentinel})
	if resp.StatusCode != http.StatusForbidden || len(plain.requests()) != 0 {
		t.Errorf("the plugin's own sentinel from another server: %s, host got %d requests", resp.Status, len(plain.requests()))
	}
	found := false
	for _, f := range sf.p.Findings() {
		found = found || f.Code == api.CodeSecretSentElsewhere && f.Subject == "alpha/second"
	}
	if !found {
		t.Errorf("no finding for alpha/second: %+v", sf.p.Findings())
	}
}
