package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"oz0.ai/node/internal/otlptest"
	"oz0.ai/node/node/api"
)

// collector stands in for an OTLP collector on loopback, over HTTP/1.1, h2c
// or TLS, to see what the exporter sends and to answer as a test needs. That
// the answers are understood by a real collector is TestSpansReachARealReceiver's.
type collector struct {
	*httptest.Server
	answer func(n int, w http.ResponseWriter, r *http.Request) // n counts requests from 1; nil: success

	mu   sync.Mutex
	reqs []request
}

// request is what the collector got: the headers and the message, unframed
// and uncompressed.
type request struct {
	header     http.Header
	proto      int // HTTP major version
	tls        bool
	compressed bool // gRPC frame's flag
	message    []byte
}

func newCollector(t *testing.T, tlsOn bool, answer func(n int, w http.ResponseWriter, r *http.Request)) *collector {
	c := &collector{answer: answer}
	c.Server = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	c.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the tests'
	if tlsOn {
		c.EnableHTTP2 = true
		c.StartTLS()
	} else {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		c.Config.Protocols = &p
		c.Start()
	}
	t.Cleanup(c.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	got := request{header: r.Header.Clone(), proto: r.ProtoMajor, tls: r.TLS != nil}
	isGRPC := r.Header.Get("Content-Type") == "application/grpc"
	if isGRPC && len(body) >= 5 {
		got.compressed = body[0] == 1
		body = body[5:]
	}
	if got.compressed || r.Header.Get("Content-Encoding") == "gzip" {
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	got.message = body
	c.mu.Lock()
	c.reqs = append(c.reqs, got)
	n := len(c.reqs)
	c.mu.Unlock()
	switch {
	case c.answer != nil:
		c.answer(n, w, r)
	case isGRPC:
		grpcAnswer(w, nil, 0, "", nil)
	default:
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
}

func (c *collector) requests() []request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]request(nil), c.reqs...)
}

// grpcAnswer answers a gRPC call: msg as the response message, status and
// message and details in the trailers.
func grpcAnswer(w http.ResponseWriter, msg []byte, status int, message string, details []byte) {
	w.Header().Set("Content-Type", "application/grpc")
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	w.Write(append(frame, msg...))
	w.Header().Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(status))
	if message != "" {
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", strings.ReplaceAll(message, " ", "%20"))
	}
	if details != nil {
		w.Header().Set(http.TrailerPrefix+"Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(details))
	}
}

// testExporter is the exporter New would build for proto and endpoint with
// the variables, its back-off shortened so that retries take milliseconds.
func testExporter(t *testing.T, proto, endpoint string, vars map[string]string) *exporter {
	t.Helper()
	m := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": proto}
	for k, v := range vars {
		m[k] = v
	}
	e, err := newExporter(Config{Endpoint: endpoint, Getenv: env(m), Version: "test"}, proto)
	if err != nil {
		t.Fatal(err)
	}
	e.retry = backoff{initial: 10 * time.Millisecond, max: 50 * time.Millisecond, total: 5 * time.Second}
	t.Cleanup(func() { e.Shutdown(context.Background()) })
	return e
}

var protocols = []string{"http/protobuf", "grpc"}

// Compressed with gzip (OTEL_EXPORTER_OTLP_COMPRESSION), the spans reach a
// real Collector receiver over both protocols.
func TestCompressedSpansReachARealReceiver(t *testing.T) {
	rcv := otlptest.Start(t)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			endpoint := "http://" + rcv.HTTP
			if proto == "grpc" {
				endpoint = "http://" + rcv.GRPC
			}
			tr, err := New(context.Background(), Config{Endpoint: endpoint, Version: "test",
				Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": proto, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"})})
			if err != nil {
				t.Fatal(err)
			}
			tr.Egress(api.EgressDecision{Time: time.Now().UTC().Format(time.RFC3339Nano), Plugin: "gz-" + proto, Host: "evil.example.com", Port: 443, Decision: "deny", Rule: "r"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			s := rcv.WaitSpan(t, "egress connect", func(s Span) bool { return s.Attrs["oz0.plugin"] == "gz-"+proto })
			if s.Status != "Error" || s.Resource["service.name"] != "oz0-node" {
				t.Errorf("span %+v", s)
			}
		})
	}
}

// What the exporter puts on the wire: OTEL_EXPORTER_OTLP_HEADERS' headers
// (values URL-decoded), a User-Agent naming the node, OTLP/HTTP's content
// type and gzip encoding, gRPC's content type, te, grpc-timeout from
// OTEL_EXPORTER_OTLP_TIMEOUT, grpc-encoding and the frame's compressed flag,
// over HTTP/2 for gRPC; and a message the Collector's decoder reads.
func TestHeadersAndCompressionOnTheWire(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := newCollector(t, false, nil)
			e := testExporter(t, proto, c.URL, map[string]string{
				"OTEL_EXPORTER_OTLP_HEADERS":            "Api-Key=s%20e%3Dcret, x-tenant=acme,",
				"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_COMPRESSION": "none",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
			})
			if err := e.ExportSpans(context.Background(), testSpans(3)); err != nil {
				t.Fatal(err)
			}
			reqs := c.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			h := r.header
			if h.Get("Api-Key") != "s e=cret" || h.Get("X-Tenant") != "acme" || !strings.HasPrefix(h.Get("User-Agent"), "oz0-node/test") {
				t.Errorf("headers %v", h)
			}
			if proto == "grpc" {
				if r.proto != 2 || h.Get("Content-Type") != "application/grpc" || h.Get("Te") != "trailers" ||
					h.Get("Grpc-Encoding") != "gzip" || !r.compressed {
					t.Errorf("HTTP/%d, compressed flag %v, headers %v", r.proto, r.compressed, h)
				}
				if to := h.Get("Grpc-Timeout"); !strings.HasSuffix(to, "m") || len(to) != 5 || to > "2500m" || to < "2000m" {
					t.Errorf("grpc-timeout %q for 2500 ms", to)
				}
			} else if h.Get("Content-Type") != "application/x-protobuf" || h.Get("Content-Encoding") != "gzip" {
				t.Errorf("headers %v", h)
			}
			if td := decode(t, r.message); td.SpanCount() != 3 {
				t.Errorf("%d spans in the request", td.SpanCount())
			}
		})
	}
}

// A collector that is unavailable for a moment (503, gRPC UNAVAILABLE) or
// asks to be given time (429 with Retry-After, RESOURCE_EXHAUSTED with a
// RetryInfo) gets the spans again, after the time it asked for.
func TestRetriesWhileTheCollectorIsUnavailable(t *testing.T) {
	for _, c := range []struct {
		name, proto string
		wait        time.Duration
		refuse      func(w http.ResponseWriter)
	}{
		{"503", "http/protobuf", 0, func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }},
		{"429 Retry-After", "http/protobuf", time.Second, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}},
		{"UNAVAILABLE", "grpc", 0, func(w http.ResponseWriter) { grpcAnswer(w, nil, 14, "restarting", nil) }},
		{"RESOURCE_EXHAUSTED RetryInfo", "grpc", 300 * time.Millisecond, func(w http.ResponseWriter) {
			grpcAnswer(w, nil, 8, "slow down", rpcStatusMessage(8, "slow down", 300*time.Millisecond))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := newCollector(t, false, func(n int, w http.ResponseWriter, r *http.Request) {
				switch {
				case n == 1:
					c.refuse(w)
				case c.proto == "grpc":
					grpcAnswer(w, nil, 0, "", nil)
				}
			})
			e := testExporter(t, c.proto, col.URL, nil)
			start := time.Now()
			if err := e.ExportSpans(context.Background(), testSpans(2)); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			reqs := col.requests()
			if len(reqs) != 2 || !bytes.Equal(reqs[0].message, reqs[1].message) {
				t.Fatalf("%d requests, want the same twice", len(reqs))
			}
			if took < c.wait {
				t.Errorf("tried again after %v, the collector asked for %v", took, c.wait)
			}
		})
	}
}

// A collector's refusal that another try would not change (400, gRPC
// INVALID_ARGUMENT, RESOURCE_EXHAUSTED without a RetryInfo) is an error naming
// it, after one request; so is a partial success that rejected spans.
func TestRefusalsAreErrors(t *testing.T) {
	partial := appendMessage(nil, 1, func(b []byte) []byte {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 2)
		return appendString(b, 2, "spans too old")
	})
	for _, c := range []struct {
		name, proto string
		answer      func(w http.ResponseWriter)
		want        []string
	}{
		{"400", "http/protobuf", func(w http.ResponseWriter) { http.Error(w, "bad spans\nat line 1", http.StatusBadRequest) },
			[]string{"400 Bad Request: bad spans at line 1", "OTLP export of 2 spans to http://"}},
		{"400 status", "http/protobuf", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(rpcStatusMessage(3, "no trace id", 0))
		}, []string{"400 Bad Request: no trace id"}},
		{"INVALID_ARGUMENT", "grpc", func(w http.ResponseWriter) {
			// Trailers-only: the status in the headers, no body.
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "3")
			w.Header().Set("Grpc-Message", "bad%20spans")
		}, []string{"INVALID_ARGUMENT: bad spans", "/opentelemetry.proto.collector.trace.v1.TraceService/Export"}},
		{"RESOURCE_EXHAUSTED", "grpc", func(w http.ResponseWriter) { grpcAnswer(w, nil, 8, "quota", nil) }, []string{"RESOURCE_EXHAUSTED: quota"}},
		{"partial success", "http/protobuf", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.Write(partial)
		}, []string{"rejected 2 spans: spans too old"}},
		{"partial success", "grpc", func(w http.ResponseWriter) { grpcAnswer(w, partial, 0, "", nil) }, []string{"rejected 2 spans: spans too old"}},
	} {
		t.Run(c.name+" "+c.proto, func(t *testing.T) {
			col := newCollector(t, false, func(n int, w http.ResponseWriter, r *http.Request) { c.answer(w) })
			e := testExporter(t, c.proto, col.URL, nil)
			err := e.ExportSpans(context.Background(), testSpans(2))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := len(col.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// A collector that stays unavailable is given up on when the back-off's
// budget is spent, or when the caller's context ends, whichever is first.
func TestRetriesAreBounded(t *testing.T) {
	col := newCollector(t, false, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	e := testExporter(t, "http/protobuf", col.URL, nil)
	e.retry.total = 200 * time.Millisecond
	err := e.ExportSpans(context.Background(), testSpans(1))
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("error %v", err)
	}
	if n := len(col.requests()); n < 2 {
		t.Errorf("%d requests: not tried again", n)
	}

	e.retry = defaultBackoff
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = e.ExportSpans(ctx, testSpans(1))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("after %v: %v", time.Since(start), err)
	}
}

// Over TLS, the CAs of OTEL_EXPORTER_OTLP_CERTIFICATE are trusted (and
// without it the collector's certificate is not), and the client certificate
// of OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _CLIENT_KEY is presented, over
// both protocols; gRPC negotiates HTTP/2.
func TestTLSWithTheVariablesCertificates(t *testing.T) {
	dir := t.TempDir()
	clientCert, clientKey, clientPool := clientCertificate(t, dir)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := newCollector(t, true, nil)
			c.TLS.ClientAuth = tls.VerifyClientCertIfGiven
			c.TLS.ClientCAs = clientPool
			ca := filepath.Join(dir, "ca.pem")
			if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate().Raw}), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := testExporter(t, proto, c.URL, nil).ExportSpans(context.Background(), testSpans(1)); err == nil ||
				!strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "gave up") {
				t.Errorf("the collector's certificate was trusted without the variable, or tried again: %v", err)
			}
			e := testExporter(t, proto, c.URL, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
				"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": clientCert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey})
			if err := e.ExportSpans(context.Background(), testSpans(1)); err != nil {
				t.Fatal(err)
			}
			reqs := c.requests()
			if len(reqs) != 1 || !reqs[0].tls || (proto == "grpc" && reqs[0].proto != 2) {
				t.Fatalf("%d requests: %+v", len(reqs), reqs)
			}
			if td := decode(t, reqs[0].message); td.SpanCount() != 1 {
				t.Errorf("%d spans", td.SpanCount())
			}
		})
	}
	// The client certificate is what the collector checks.
	c := newCollector(t, true, nil)
	c.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	c.TLS.ClientCAs = clientPool
	ca := filepath.Join(dir, "ca2.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate().Raw}), 0o600)
	err := testExporter(t, "http/protobuf", c.URL, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca}).ExportSpans(context.Background(), testSpans(1))
	if err == nil {
		t.Error("a collector requiring a client certificate took a request without one")
	}

	if err := testExporter(t, "http/protobuf", c.URL, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": clientCert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}).
		ExportSpans(context.Background(), testSpans(1)); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
}

// clientCertificate writes a self-signed client certificate and its key to
// dir, and returns their paths and a pool trusting it.
func clientCertificate(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oz0-node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}

// A variable the exporter cannot use fails New with an error naming it; the
// traces variable is the one read when both are set.
func TestBadVariablesFailNew(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	for _, c := range []struct {
		proto string
		vars  map[string]string
		want  string
	}{
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "ten"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "5", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "-1"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "br"}, "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a b=c"}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=%zz"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_CLIENT_KEY"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM, "OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://c:21"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317", "OTEL_EXPORTER_OTLP_INSECURE": "maybe"}, "OTEL_EXPORTER_OTLP_INSECURE"},
	} {
		vars := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": c.proto}
		for k, v := range c.vars {
			vars[k] = v
		}
		tr, err := New(context.Background(), Config{Getenv: env(vars)})
		if err == nil {
			tr.Shutdown(context.Background())
			t.Errorf("%v: New took it", c.vars)
		} else if !strings.Contains(err.Error(), c.want+" ") && !strings.Contains(err.Error(), c.want+":") {
			t.Errorf("%v: the error %q does not name %s", c.vars, err, c.want)
		}
	}
	if _, err := New(context.Background(), Config{Endpoint: "http://c:4318", Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x"})}); err != nil {
		t.Errorf("the flag's endpoint wins over a bad variable's: %v", err)
	}
}

// Where requests go, from the flag or the variables, as the specification
// has it for each protocol.
func TestExportURL(t *testing.T) {
	for _, c := range []struct {
		proto, flag string
		vars        map[string]string
		want        string
	}{
		{"http/protobuf", "", nil, "http://localhost:4318/v1/traces"},
		{"http/protobuf", "http://c:4318", nil, "http://c:4318/v1/traces"},
		{"http/protobuf", "https://c/otlp/v1/traces", nil, "https://c/otlp/v1/traces"},
		{"http/protobuf", "http://flag:4318", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:4318/x"}, "http://flag:4318/v1/traces"},
		{"http/protobuf", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4318"}, "http://t:4318/custom"},
		{"http/protobuf", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4318"}, "http://g:4318/v1/traces"},
		{"http/protobuf", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://g/prefix/"}, "https://g/prefix/v1/traces"},
		{"grpc", "", nil, "http://localhost:4317" + grpcExportPath},
		{"grpc", "http://c:4317", nil, "http://c:4317" + grpcExportPath},
		{"grpc", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://g:4317/"}, "https://g:4317" + grpcExportPath},
		{"grpc", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "g:4317"}, "https://g:4317" + grpcExportPath},
		{"grpc", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "g:4317", "OTEL_EXPORTER_OTLP_INSECURE": "true"}, "http://g:4317" + grpcExportPath},
		{"grpc", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "g:4317", "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "false"}, "https://g:4317" + grpcExportPath},
		{"grpc", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://g:4317", "OTEL_EXPORTER_OTLP_INSECURE": "false"}, "http://g:4317" + grpcExportPath},
	} {
		got, err := exportURL(Config{Endpoint: c.flag, Getenv: env(c.vars)}, c.proto == "grpc")
		if err != nil || got != c.want {
			t.Errorf("%s %q %v: %q %v, want %q", c.proto, c.flag, c.vars, got, err, c.want)
		}
	}
}

// Exports may run at once; Shutdown ends those under way (a collector that
// never answers holds none up), after it every export is refused, and it
// gives up waiting when its context ends.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	col := newCollector(t, false, func(n int, w http.ResponseWriter, r *http.Request) {
		if n > 8 {
			select { // hang until the client goes or the test ends
			case <-r.Context().Done():
			case <-release:
			}
		}
	})
	defer close(release)
	e := testExporter(t, "http/protobuf", col.URL, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := e.ExportSpans(context.Background(), testSpans(2)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(col.requests()); n != 8 {
		t.Fatalf("%d requests for 8 exports", n)
	}
	hung := make(chan error)
	go func() { hung <- e.ExportSpans(context.Background(), testSpans(1)) }()
	for deadline := time.Now().Add(10 * time.Second); len(col.requests()) < 9; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ninth export never reached the collector")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-hung; err == nil {
		t.Error("the export under way at Shutdown succeeded")
	}
	if err := e.ExportSpans(context.Background(), testSpans(1)); !errors.Is(err, errShutDown) {
		t.Errorf("after Shutdown: %v", err)
	}

	// An export that would not end: Shutdown returns at its context's end.
	e2 := testExporter(t, "http/protobuf", col.URL, nil)
	e2.running.Add(1)
	defer e2.running.Done()
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := e2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with an export stuck: %v", err)
	}
}

// A password in an endpoint variable (the flag refuses one) or a token in a
// malformed header never reaches an error, which the node logs: neither an
// export's nor New's.
func TestCredentialsInTheEndpointStayOutOfErrors(t *testing.T) {
	for _, proto := range protocols {
		col := newCollector(t, false, func(n int, w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Content-Type") == "application/grpc" {
				grpcAnswer(w, nil, 3, "no", nil)
				return
			}
			http.Error(w, "no", http.StatusBadRequest)
		})
		endpoint := strings.Replace(col.URL, "://", "://user:s3cret@", 1) + "/v1/traces"
		e := testExporter(t, proto, "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint})
		err := e.ExportSpans(context.Background(), testSpans(1))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: export error %v", proto, err)
		}
		_, err = New(context.Background(), Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": proto,
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://user:s3cret@c:21"})})
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: New's error %v", proto, err)
		}
		// A header written without its '=' or with a bad name: the error
		// names the entry, not the token in it.
		for _, h := range []string{"x-team=a,authorization Bearer s3cret", "authorization: Bearer s3cret=1"} {
			_, err = New(context.Background(), Config{Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": proto,
				"OTEL_EXPORTER_OTLP_HEADERS": h})})
			if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
				t.Errorf("%s: New's error for headers %q: %v", proto, h, err)
			}
		}
	}
}
