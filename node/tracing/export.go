package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"
)

// The exporter is the node's own rather than OpenTelemetry's otlptracehttp
// and otlptracegrpc: those link gRPC, whose package initialisers cost every
// node process about 4 MB of memory with tracing off. OTLP/gRPC's one unary
// call is spoken here over net/http's HTTP/2.

// grpcExportPath is the gRPC method a collector's TraceService exports by.
const grpcExportPath = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// maxAnswer bounds what is read of a collector's answer: an
// ExportTraceServiceResponse or an error's status is small.
const maxAnswer = 64 << 10

var errShutDown = errors.New("the OTLP exporter is shut down")

// settings are what the flag and the OTEL_EXPORTER_OTLP_* variables ask of the
// exporter.
type settings struct {
	grpc    bool
	url     string      // the traces URL, or for gRPC the Export method's
	headers [][2]string // OTEL_EXPORTER_OTLP_HEADERS, lower-cased keys
	gzip    bool
	timeout time.Duration // of one request
	tls     *tls.Config   // nil: the system's roots, no client certificate
}

// variable is the traces variable's value when set, else the general one's,
// as the specification has it, with the name of the one read (for errors).
func variable(getenv func(string) string, suffix string) (name, value string) {
	name = "OTEL_EXPORTER_OTLP_TRACES_" + suffix
	if v := strings.TrimSpace(getenv(name)); v != "" {
		return name, v
	}
	name = "OTEL_EXPORTER_OTLP_" + suffix
	return name, strings.TrimSpace(getenv(name))
}

// readSettings reads the exporter's settings; a variable that cannot be read
// is an error naming it. Certificate files are read here too, so that a bad
// one fails New rather than each export.
func readSettings(c Config, proto string) (settings, error) {
	s := settings{grpc: proto == "grpc", timeout: 10 * time.Second}
	var err error
	if s.url, err = exportURL(c, s.grpc); err != nil {
		return s, err
	}
	if name, v := variable(c.Getenv, "HEADERS"); v != "" {
		if s.headers, err = parseHeaders(v); err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
	}
	if name, v := variable(c.Getenv, "TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return s, fmt.Errorf("%s %q: not a positive number of milliseconds", name, v)
		}
		s.timeout = time.Duration(ms) * time.Millisecond
	}
	switch name, v := variable(c.Getenv, "COMPRESSION"); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		s.gzip = true
	default:
		return s, fmt.Errorf("%s %q: the node compresses with gzip or none", name, v)
	}
	s.tls, err = readTLS(c.Getenv)
	return s, err
}

// exportURL is where requests go. For OTLP/HTTP: the flag's URL with
// /v1/traces when it names no path, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it
// is, OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added to its path. For gRPC:
// the endpoint's scheme and host (http:// is plain HTTP/2, https:// and a bare
// host:port TLS unless OTEL_EXPORTER_OTLP_INSECURE=true) with Export's path.
func exportURL(c Config, grpc bool) (string, error) {
	src, raw, general := "--otlp-endpoint", c.Endpoint, false
	if raw == "" {
		src = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		if raw = strings.TrimSpace(c.Getenv(src)); raw == "" {
			src = "OTEL_EXPORTER_OTLP_ENDPOINT"
			raw, general = strings.TrimSpace(c.Getenv(src)), true
		}
	}
	if !grpc {
		switch {
		case raw == "":
			return "http://localhost:4318/v1/traces", nil
		case src == "--otlp-endpoint":
			raw = tracesURL(raw)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%s %q: not an http:// or https:// URL", src, redacted(raw))
		}
		if general {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			u.RawPath = ""
		}
		return u.String(), nil
	}
	if raw == "" {
		raw = "http://localhost:4317"
	}
	if !strings.Contains(raw, "://") {
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return "", fmt.Errorf("%s %q: neither a URL nor host:port", src, redacted(raw))
		}
		name, v := variable(c.Getenv, "INSECURE")
		insecure, err := parseBool(v)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if insecure {
			raw = "http://" + raw
		} else {
			raw = "https://" + raw
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s %q: not an http:// or https:// URL nor host:port", src, redacted(raw))
	}
	return u.Scheme + "://" + u.Host + grpcExportPath, nil
}

// redacted is an endpoint as errors show it: a password in its URL (from a
// variable; the flag refuses one) would otherwise reach the node's log.
func redacted(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		if strings.Contains(endpoint, "@") {
			return "(an endpoint with credentials)"
		}
		return endpoint
	}
	return u.Redacted()
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, fmt.Errorf("%q: neither true nor false", v)
}

// parseHeaders reads key=value pairs separated by commas, the values
// URL-encoded (the W3C Baggage format the specification names).
func parseHeaders(v string) ([][2]string, error) {
	var out [][2]string
	n := 0
	for item := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		n++
		// The error names the entry, never its text: a header's value is
		// often a credential, and the error reaches the node's log.
		k, val, ok := strings.Cut(item, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok {
			return nil, fmt.Errorf("entry %d is not key=value", n)
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("entry %d's key is not a header name", n)
		}
		val, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil || strings.ContainsAny(val, "\r\n\x00") {
			return nil, fmt.Errorf("%s's value is not a URL-encoded header value", k)
		}
		out = append(out, [2]string{k, val})
	}
	return out, nil
}

// readTLS builds the TLS configuration the CERTIFICATE (CAs to trust instead
// of the system's), CLIENT_CERTIFICATE and CLIENT_KEY variables ask for; nil
// when they ask for nothing.
func readTLS(getenv func(string) string) (*tls.Config, error) {
	caName, ca := variable(getenv, "CERTIFICATE")
	certName, cert := variable(getenv, "CLIENT_CERTIFICATE")
	keyName, key := variable(getenv, "CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caName, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s %s: no PEM certificate in it", caName, ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("%s and %s go together: one is not set", certName, keyName)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s %s with %s %s: %w", certName, cert, keyName, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// backoff is how failed exports are tried again: after initial, doubling up
// to max, with jitter, for at most total since the first try.
type backoff struct{ initial, max, total time.Duration }

var defaultBackoff = backoff{initial: time.Second, max: 30 * time.Second, total: time.Minute}

// retryable is a failure worth another try: the collector is busy or away.
// wait is how long it asked for (Retry-After, RetryInfo), 0 if it did not.
type retryable struct {
	err  error
	wait time.Duration
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// do runs try until it succeeds, fails for good, the budget is spent or ctx
// is done.
func (b backoff) do(ctx context.Context, try func(context.Context) error) error {
	start, delay := time.Now(), b.initial
	for tries := 1; ; tries++ {
		err := try(ctx)
		var r *retryable
		if !errors.As(err, &r) {
			return err
		}
		if ctx.Err() != nil {
			return r.err
		}
		wait := r.wait
		if wait <= 0 {
			wait = delay/2 + rand.N(delay) // ½ to 1½ the delay, so nodes spread out
		}
		delay = min(2*delay, b.max)
		if time.Since(start)+wait > b.total {
			return fmt.Errorf("%w (gave up after %d tries)", r.err, tries)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (then %w before another try)", r.err, ctx.Err())
		case <-t.C:
		}
	}
}

// exporter is an sdktrace.SpanExporter speaking OTLP/HTTP (protobuf) or
// OTLP/gRPC to one collector. Its methods are safe for concurrent use.
type exporter struct {
	settings
	client    *http.Client
	userAgent string
	retry     backoff

	stop   context.Context // done once Shutdown begins: in-flight exports end
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup // exports under way
}

var _ sdktrace.SpanExporter = (*exporter)(nil)

func newExporter(c Config, proto string) (*exporter, error) {
	s, err := readSettings(c, proto)
	if err != nil {
		return nil, err
	}
	t := &http.Transport{
		TLSClientConfig:     s.tls,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        2,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	if s.grpc {
		// gRPC is HTTP/2 only: with prior knowledge over plain TCP, by ALPN
		// over TLS.
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
	} else {
		t.Proxy = http.ProxyFromEnvironment
	}
	ua := "oz0-node"
	if c.Version != "" {
		ua += "/" + c.Version
	}
	e := &exporter{settings: s, client: &http.Client{Transport: t}, userAgent: ua, retry: defaultBackoff}
	e.stop, e.cancel = context.WithCancel(context.Background())
	return e, nil
}

// ExportSpans sends the spans in one request, tried again while the collector
// is unavailable, for as long as ctx and the back-off's budget allow.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return errShutDown
	}
	e.running.Add(1)
	e.mu.Unlock()
	defer e.running.Done()
	if len(spans) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.stop, cancel)()

	body := encodeRequest(spans)
	if e.gzip {
		body = gzipped(body)
	}
	send := e.postHTTP
	if e.grpc {
		// The gRPC message's frame: a compressed flag and a big-endian length.
		frame := make([]byte, 5, 5+len(body))
		if e.gzip {
			frame[0] = 1
		}
		binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
		body = append(frame, body...)
		send = e.postGRPC
	}
	if err := e.retry.do(ctx, func(ctx context.Context) error { return send(ctx, body) }); err != nil {
		return fmt.Errorf("OTLP export of %d spans to %s: %w", len(spans), redacted(e.url), err)
	}
	return nil
}

// Shutdown ends exports under way and refuses new ones, and waits for those
// under way to return, or for ctx.
func (e *exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	e.cancel()
	done := make(chan struct{})
	go func() { e.running.Wait(); close(done) }()
	select {
	case <-done:
		e.client.CloseIdleConnections()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b) // a bytes.Buffer takes all
	zw.Close()
	return buf.Bytes()
}

// request is a POST of body to the exporter's URL with the headers every
// request carries.
func (e *exporter) request(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range e.headers {
		req.Header.Add(h[0], h[1])
	}
	req.Header.Set("User-Agent", e.userAgent)
	return req, nil
}

// do sends the request; a failure to reach the collector is worth another try
// (OTLP's specification asks it, and gRPC calls it UNAVAILABLE), a
// certificate either side refuses is not.
func (e *exporter) do(req *http.Request) (*http.Response, []byte, error) {
	resp, err := e.client.Do(req)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // its text repeats the URL
		}
		var verr *tls.CertificateVerificationError
		var op *net.OpError // crypto/tls's TLS alert from the collector
		if errors.As(err, &verr) || errors.As(err, &op) && op.Op == "remote error" {
			return nil, nil, err
		}
		return nil, nil, &retryable{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // so the connection can serve again
	return resp, data, err
}

// postHTTP is one OTLP/HTTP request.
func (e *exporter) postHTTP(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := e.request(ctx, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, data, err := e.do(req)
	if resp == nil {
		return err
	}
	isProto := strings.Contains(resp.Header.Get("Content-Type"), "protobuf")
	if resp.StatusCode/100 == 2 {
		// The spans were taken: a broken answer is no reason to send them again.
		if err != nil || !isProto {
			return nil
		}
		return e.partial(data)
	}
	err = fmt.Errorf("%s%s", resp.Status, excerpt(data, isProto))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryable{err: err, wait: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return err
}

// excerpt is a short text of an error's answer: a google.rpc.Status's message
// when it is protobuf, else the start of the text.
func excerpt(data []byte, isProto bool) string {
	if isProto {
		if msg, _, err := rpcStatus(data); err == nil && msg != "" {
			return ": " + msg
		}
		return ""
	}
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(data), "?")), " ")
	if len(s) > 200 {
		s = s[:200]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	if s == "" {
		return ""
	}
	return ": " + s
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// partial reads an ExportTraceServiceResponse: spans the collector refused
// are an error; a message alone is a warning.
func (e *exporter) partial(msg []byte) error {
	rejected, message, err := partialSuccess(msg)
	switch {
	case err != nil:
		slog.Warn("OTLP export: the collector's answer is not an ExportTraceServiceResponse", "url", e.url, "err", err)
	case rejected > 0:
		return fmt.Errorf("the collector rejected %d spans: %s", rejected, message)
	case message != "":
		slog.Warn("OTLP export: the collector took the spans with a warning", "url", e.url, "message", message)
	}
	return nil
}

// grpcCodes names gRPC's status codes.
var grpcCodes = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

const (
	grpcCancelled         = 1
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcAborted           = 10
	grpcOutOfRange        = 11
	grpcUnavailable       = 14
	grpcDataLoss          = 15
)

// postGRPC is one unary call of TraceService/Export, body its framed message.
func (e *exporter) postGRPC(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := e.request(ctx, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Accept-Encoding", "gzip")
	if e.gzip {
		req.Header.Set("Grpc-Encoding", "gzip")
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Header.Set("Grpc-Timeout", grpcTimeout(time.Until(dl)))
	}
	resp, data, readErr := e.do(req)
	if resp == nil {
		return readErr
	}
	// grpc-status ends the answer as a trailer, or stands in its headers when
	// the server answers with trailers only.
	status, message, details := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"), resp.Trailer.Get("Grpc-Status-Details-Bin")
	if status == "" {
		status, message, details = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"), resp.Header.Get("Grpc-Status-Details-Bin")
	}
	if status == "" {
		err := fmt.Errorf("%s with no grpc-status", resp.Status)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
			resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			// gRPC reads these as UNAVAILABLE: a proxy's, with no server behind.
			return &retryable{err: err}
		case readErr != nil:
			return &retryable{err: fmt.Errorf("the answer broke off: %w", readErr)}
		}
		return err
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return fmt.Errorf("grpc-status %q", status)
	}
	if code == 0 {
		if readErr != nil {
			return nil // taken; see postHTTP
		}
		msg, err := grpcMessage(data, resp.Header.Get("Grpc-Encoding"))
		if err != nil {
			slog.Warn("OTLP export: the collector's answer is not a gRPC message", "url", e.url, "err", err)
			return nil
		}
		return e.partial(msg)
	}
	name := "code " + status
	if code < len(grpcCodes) {
		name = grpcCodes[code]
	}
	if m, err := url.PathUnescape(message); err == nil {
		message = m
	}
	err = fmt.Errorf("gRPC status %s: %s", name, message)
	var wait time.Duration
	if details != "" {
		if b, derr := base64.RawStdEncoding.DecodeString(strings.TrimRight(details, "=")); derr == nil {
			_, wait, _ = rpcStatus(b)
		}
	}
	switch code {
	case grpcCancelled, grpcDeadlineExceeded, grpcAborted, grpcOutOfRange, grpcUnavailable, grpcDataLoss:
		return &retryable{err: err, wait: wait}
	case grpcResourceExhausted:
		// Worth another try only when the server says when (the
		// specification's rule): else the quota is spent for good.
		if wait > 0 {
			return &retryable{err: err, wait: wait}
		}
	}
	return err
}

// grpcTimeout is a grpc-timeout header's value: at most 8 digits and a unit.
func grpcTimeout(d time.Duration) string {
	if ms := d.Milliseconds(); ms < 1e8 {
		return strconv.FormatInt(max(ms, 1), 10) + "m"
	}
	return strconv.FormatInt(min(int64(d/time.Second), 1e8-1), 10) + "S"
}

// grpcMessage is the message of a unary answer: one frame of a compressed
// flag, a big-endian length and the message.
func grpcMessage(data []byte, encoding string) ([]byte, error) {
	if len(data) == 0 {
		return nil, nil
	}
	if len(data) < 5 {
		return nil, fmt.Errorf("a frame of %d bytes", len(data))
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if uint64(len(data)-5) < uint64(n) {
		return nil, fmt.Errorf("a frame of %d bytes says %d", len(data)-5, n)
	}
	msg := data[5 : 5+n]
	if data[0] == 0 {
		return msg, nil
	}
	if encoding != "gzip" {
		return nil, fmt.Errorf("a message compressed with %q", encoding)
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(zr, maxAnswer))
}
