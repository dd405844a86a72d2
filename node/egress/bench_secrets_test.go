package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// What putting secrets in costs (docs/promises.md §17), against the plain
// tunnel every other host gets: the same HTTPS host on loopback (a test CA as
// its issuer), reached through the proxy's unix socket either as a tunnel (no
// secret bound to it) or intercepted (TLS terminated by the node's CA, a second
// handshake to the host).
//
//	go test -run XXX -bench 'TLS' -benchtime 4x ./node/egress/

const interceptSize = 100 << 20

// benchTLSHost serves / (a few bytes) and /big (interceptSize bytes) as both
// hostBoth (a secret is bound to it) and hostOther (none is).
func benchTLSHost(b *testing.B) (*secretsFixture, *httptest.Server, *testCA) {
	upCA := newTestCA(b, "bench upstream CA")
	sf := newSecretsFixture(b, upCA)
	// The bench fixture binds one secret, to hostBoth only.
	if err := sf.p.UpdatePlugin(PluginRules{Plugin: "alpha", Egress: testManifest, Secrets: []Secret{
		{Key: "token", Sentinel: sf.sentinel, Value: testSecret, Hosts: []string{hostBoth}},
	}}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(interceptSize))
		for left := interceptSize; left > 0; left -= len(buf) {
			w.Write(buf[:min(left, len(buf))])
		}
	}))
	cert := upCA.issue(b, hostBoth, hostOther)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return sf, srv, upCA
}

// benchFirstRequest times a new connection's CONNECT, TLS handshake(s) and
// first small response.
func benchFirstRequest(b *testing.B, host string) {
	sf, srv, upCA := benchTLSHost(b)
	c := sf.client(b, false, upCA.cert)
	url := hostURL(srv, host) + "/"
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ds = append(ds, time.Since(start))
	}
	reportMedian(b, ds)
}

func BenchmarkLatencyTLSTunnel(b *testing.B)      { benchFirstRequest(b, hostOther) }
func BenchmarkLatencyTLSIntercepted(b *testing.B) { benchFirstRequest(b, hostBoth) }

// benchTLSThroughput moves interceptSize bytes per operation over one kept-alive
// connection; with the sentinel in the request the response is also scanned for
// the value (scrubResponse).
func benchTLSThroughput(b *testing.B, host string, h2, sentinel bool) {
	sf, srv, upCA := benchTLSHost(b)
	c := sf.client(b, h2, upCA.cert)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	c.Timeout = 0
	req, _ := http.NewRequest("GET", hostURL(srv, host)+"/big", nil)
	if sentinel {
		req.Header.Set("Authorization", "Bearer "+sf.sentinel)
	}
	b.SetBytes(interceptSize)
	defer cpuMeterOf(b, interceptSize)()
	for b.Loop() {
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		drain(b, resp.Body, interceptSize)
		resp.Body.Close()
	}
}

func BenchmarkThroughputTLSTunnel(b *testing.B) { benchTLSThroughput(b, hostOther, false, false) }
func BenchmarkThroughputTLSIntercepted(b *testing.B) {
	benchTLSThroughput(b, hostBoth, false, false)
}
func BenchmarkThroughputTLSInterceptedSecret(b *testing.B) {
	benchTLSThroughput(b, hostBoth, false, true)
}
func BenchmarkThroughputTLSInterceptedH2(b *testing.B) { benchTLSThroughput(b, hostBoth, true, true) }
