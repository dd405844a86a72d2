package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/policy"
)

// Secrets stay outside the sandbox (docs/promises.md §17), end to end on bwrap
// and gVisor: the fixture secret-api's server calls an API with its key, set by
// the operator, and never holds the key. The node runs in a private mount
// namespace whose /etc/hosts names the loopback test hosts; a test CA issues
// their certificates, and the node trusts it as its root (SSL_CERT_FILE, as Go
// reads the host's roots).
func TestE2ESecretsStayOutsideTheSandbox(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == policy.BackendSeatbelt {
			continue
		}
		t.Run(backend, func(t *testing.T) { testSecretsStayOutside(t, backend) })
	}
}

const (
	e2eSecret     = "sk-e2e-REAL-4b7d1f0c"
	e2eSecretNext = "sk-e2e-NEXT-90e1aa2d"
	e2eBetaSecret = "beta-e2e-REAL-5521"
)

// recorder is a loopback test host that keeps every request it gets and
// answers with the Authorization header it saw (as an API's error might).
type recorder struct {
	*httptest.Server
	mu  sync.Mutex
	got []*http.Request
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(strings.NewReader(string(b)))
	r.mu.Lock()
	r.got = append(r.got, req)
	r.mu.Unlock()
	w.Header().Set("X-Seen-Authorization", req.Header.Get("Authorization"))
	fmt.Fprintf(w, "seen %s %s|%s|%s", req.Proto, req.Header.Get("Authorization"), req.URL.RawQuery, b)
}

func (r *recorder) last(path string) *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.got) - 1; i >= 0; i-- {
		if r.got[i].URL.Path == path {
			return r.got[i]
		}
	}
	return nil
}

func (r *recorder) port() string { return strconv.Itoa(r.Listener.Addr().(*net.TCPAddr).Port) }

// testIssuer is a CA for the test hosts, written where SSL_CERT_FILE names it.
func testIssuer(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oz0 e2e test hosts CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(t.TempDir(), "test-roots.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return cert, key, file
}

func tlsRecorder(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, host string) *recorder {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	r.Server = httptest.NewUnstartedServer(r)
	r.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	r.EnableHTTP2 = true
	r.StartTLS()
	t.Cleanup(r.Close)
	return r
}

func testSecretsStayOutside(t *testing.T, backend string) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the private mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	ca, caKey, roots := testIssuer(t)
	t.Setenv("SSL_CERT_FILE", roots) // the node's own roots: the test CA alone
	api1 := tlsRecorder(t, ca, caKey, "allowed.test")
	beta := tlsRecorder(t, ca, caKey, "beta.test")
	plain := &recorder{}
	plain.Server = httptest.NewServer(plain)
	t.Cleanup(plain.Close)

	e := &egressEnv{backend: backend}
	e.e2eNode = newE2E(t, []string{"secret-api"}, "--backend", "none")
	e.stop()
	hosts := filepath.Join(filepath.Dir(e.data), "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 localhost allowed.test beta.test tenant-only.test\n::1 localhost\n"), 0o644)
	e.tenant(fmt.Sprintf("allowed.test:%s\nbeta.test:%s\ntenant-only.test:%s\n", api1.port(), beta.port(), plain.port()))
	e.restartEgress()
	if out, err := e.oz("plugin", "config", "secret-api", "api_key="+e2eSecret, "beta_key="+e2eBetaSecret); err != nil {
		t.Fatalf("plugin config: %v\n%s", err, out)
	}
	e.waitState("secret-api", "main", api.StateRunning)
	sentinel := egress.Sentinel("secret-api", "main", "api_key")

	call := func(args map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(args)
		out, err := e.oz("call", "secret-api__api", "--json", string(b), "--timeout", "30s")
		if err != nil {
			t.Logf("call %s: %v", b, err)
		}
		return strings.TrimSpace(out)
	}
	tool := func(name string, args ...string) string {
		t.Helper()
		var a []string
		for _, kv := range args {
			a = append(a, "--arg", kv)
		}
		out, _ := e.oz(append([]string{"call", "secret-api__" + name}, a...)...)
		return strings.TrimSpace(out)
	}

	// The server's environment holds the sentinel, never the key.
	if got := tool("getenv", "name=API_KEY"); got != sentinel {
		t.Errorf("API_KEY in the server's environment is %q, want the sentinel %q", got, sentinel)
	}
	environ := tool("read", "path=/proc/self/environ")
	if !strings.Contains(environ, sentinel) || strings.Contains(environ, e2eSecret) {
		t.Errorf("/proc/self/environ: holds the sentinel %v, the key %v", strings.Contains(environ, sentinel), strings.Contains(environ, e2eSecret))
	}
	if got := tool("getenv", "name=SSL_CERT_FILE"); got != "/run/oz0-ca/ca-bundle.pem" {
		t.Errorf("SSL_CERT_FILE=%q, want the node's bundle", got)
	}
	d, _ := datadir.New(e.data)
	if got := tool("read", "path="+d.EgressCA()); !strings.Contains(got, "Error") || strings.Contains(got, "PRIVATE KEY") {
		t.Errorf("the sandbox read the node's CA file: %q", got)
	}

	// An HTTPS request through the proxy variables and one made directly (the
	// node's transparent egress) arrive at the API with the real key; what the
	// API echoes back reaches the server as the sentinel.
	auth := `{"Authorization": "Bearer $API_KEY"}`
	for _, proxy := range []string{"", "none"} {
		path := "/v1/me" + proxy
		out := call(map[string]any{"url": "https://allowed.test:" + api1.port() + path + "?key=$API_KEY", "headers": auth, "proxy": proxy})
		r := api1.last(path)
		switch {
		case r == nil:
			t.Errorf("proxy %q: the API got no request; the tool said %q", proxy, out)
		case r.Header.Get("Authorization") != "Bearer "+e2eSecret || r.URL.RawQuery != "key="+e2eSecret:
			t.Errorf("proxy %q: the API got Authorization %q query %q, want the real key", proxy, r.Header.Get("Authorization"), r.URL.RawQuery)
		}
		if !strings.HasPrefix(out, "200 seen HTTP/2.0 Bearer "+sentinel+"|key="+sentinel) || strings.Contains(out, e2eSecret) {
			t.Errorf("proxy %q: the tool got %q, want 200 with the sentinel echoed (h2 upstream)", proxy, out)
		}
	}

	// A request with no sentinel passes untouched.
	out := call(map[string]any{"url": "https://allowed.test:" + api1.port() + "/untouched?a=b", "headers": `{"Authorization": "Bearer mine", "X-Test": "t"}`, "data": "payload"})
	if r := api1.last("/untouched"); r == nil || r.Header.Get("Authorization") != "Bearer mine" || r.Header.Get("X-Test") != "t" || r.URL.RawQuery != "a=b" {
		t.Errorf("a request without a sentinel was changed: %+v (tool: %q)", r, out)
	} else if b, _ := io.ReadAll(r.Body); string(b) != "payload" {
		t.Errorf("its body arrived as %q", b)
	}

	// A new value applies at the proxy at once, no restart.
	if out, err := e.oz("plugin", "config", "secret-api", "api_key="+e2eSecretNext); err != nil {
		t.Fatalf("plugin config: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		call(map[string]any{"url": "https://allowed.test:" + api1.port() + "/v1/next", "headers": auth})
		if r := api1.last("/v1/next"); r != nil && r.Header.Get("Authorization") == "Bearer "+e2eSecretNext {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new value did not reach the API: %+v", api1.last("/v1/next"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := e.waitState("secret-api", "main", api.StateRunning); s.Restarts != 0 {
		t.Errorf("the server restarted %d times for a new value", s.Restarts)
	}

	// The same sentinel sent to another allowed host is refused and reported:
	// over HTTPS to beta.test (where the other key is bound, so the proxy reads
	// the request) and over plain HTTP to tenant-only.test; the hosts get nothing.
	out = call(map[string]any{"url": "https://beta.test:" + beta.port() + "/steal", "headers": auth})
	if !strings.HasPrefix(out, "403 ") || beta.last("/steal") != nil {
		t.Errorf("the sentinel to beta.test: tool %q, host got %v; want 403 and nothing", out, beta.last("/steal") != nil)
	}
	out = call(map[string]any{"url": "http://tenant-only.test:" + plain.port() + "/steal?k=$API_KEY"})
	if !strings.HasPrefix(out, "403 ") || plain.last("/steal") != nil {
		t.Errorf("the sentinel to tenant-only.test: tool %q, host got %v; want 403 and nothing", out, plain.last("/steal") != nil)
	}
	// The other key goes where it is bound.
	call(map[string]any{"url": "https://beta.test:" + beta.port() + "/beta", "headers": `{"Authorization": "Bearer $BETA_KEY"}`})
	if r := beta.last("/beta"); r == nil || r.Header.Get("Authorization") != "Bearer "+e2eBetaSecret {
		t.Errorf("beta_key on beta.test: %+v", r)
	}
	st := e.status()
	if !slices.ContainsFunc(st.Findings, func(f api.Finding) bool {
		return f.Code == api.CodeSecretSentElsewhere && f.Subject == "secret-api/main" && strings.Contains(f.Message, "api_key")
	}) {
		t.Errorf("no secret-sent-elsewhere finding for secret-api/main: %+v", st.Findings)
	}
	var binding *api.SecretBinding
	for _, p := range st.Plugins {
		for i, b := range p.Secrets {
			if p.Name == "secret-api" && b.Key == "api_key" {
				binding = &p.Secrets[i]
			}
		}
	}
	if binding == nil || len(binding.Uses) != 1 || binding.Uses[0].Where != "server main" || !slices.Equal(binding.Uses[0].Hosts, []string{"allowed.test"}) {
		t.Errorf("status lists api_key's binding as %+v, want server main bound to allowed.test", binding)
	}

	// A crash dump of the environment lands in the node's log of the server:
	// with the sentinel, never the key.
	tool("crashenv")
	e.waitState("secret-api", "main", api.StateRunning)
	logs, _ := filepath.Glob(filepath.Join(d.Logs(), "*"))
	dumped := false
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		dumped = dumped || strings.Contains(string(b), "crash dump: API_KEY="+sentinel)
	}
	if !dumped {
		t.Errorf("no crash dump with the sentinel in the server's log (%v)", logs)
	}

	// The key appears in no log, status, audit line, show or sandbox show.
	var shown []string
	for _, args := range [][]string{
		{"status"}, {"status", "--json"}, {"findings"},
		{"plugin", "show", "secret-api"}, {"plugin", "show", "secret-api", "--json"},
		{"plugin", "config", "secret-api"}, {"plugin", "config", "secret-api", "--json"},
		{"sandbox", "show", "secret-api"}, {"sandbox", "show", "secret-api", "--backend", "gvisor"},
		{"sandbox", "show", "secret-api", "--backend", "seatbelt"},
	} {
		out, err := e.oz(args...)
		if err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
		shown = append(shown, out)
		for _, s := range []string{e2eSecret, e2eSecretNext, e2eBetaSecret} {
			if strings.Contains(out, s) {
				t.Errorf("oz0-node %s shows a secret:\n%s", strings.Join(args, " "), out)
			}
		}
	}
	if all := strings.Join(shown, "\n"); !strings.Contains(all, "allowed.test") || !strings.Contains(all, sentinel) {
		t.Errorf("status and show do not list the binding:\n%s", all)
	}
	files := []string{d.Status(), d.Health(), d.Audit()}
	files = append(files, logs...)
	audited := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		audited = audited || f == d.Audit() && strings.Contains(string(b), `"decision":"secret"`)
		for _, s := range []string{e2eSecret, e2eSecretNext, e2eBetaSecret} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds a secret", f)
			}
		}
	}
	if !audited {
		t.Errorf("the audit log has no line saying a secret was put in")
	}
	for _, s := range []string{e2eSecret, e2eSecretNext, e2eBetaSecret} {
		if strings.Contains(e.log.String(), s) {
			t.Errorf("the node's log holds a secret")
		}
	}

	// exec runs in the server's sandbox: the same sentinel, put in the same way.
	cmd := exec.Command(e.bin, "--data-dir", e.data, "exec", "secret-api", "--backend", backend, "--",
		"sh", "-c", `printf %s "$API_KEY"`)
	if b, err := cmd.Output(); err != nil || string(b) != sentinel {
		t.Errorf("exec: API_KEY=%q (%v), want the sentinel", b, err)
	}
}
