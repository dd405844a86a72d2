package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Interception (docs/promises.md §17). A connection to a host on which the
// endpoint puts a secret in is read as HTTP: TLS is terminated with a
// certificate the node's CA mints for that host (ALPN h2 or http/1.1), each
// request gets its secrets in place of their sentinels, and it goes on over a
// connection of the proxy's own, verified against the host's roots. Every other
// connection stays a plain tunnel, untouched — and so does one on which the
// server speaks first, or the client speaks neither TLS nor HTTP.

// relay carries an allowed connection once the client was told so: a plain
// tunnel, unless the endpoint puts secrets in on t. cin holds what the client
// sent past its request (nil: nothing).
func (p *Proxy) relay(s *session, t Target, rule, addr string, cin *bufio.Reader, up net.Conn) int64 {
	if p.ca.Load() == nil || !s.plugin.rules.Load().hasSecrets(s.server, t) {
		return p.tunnel(s.conn, up, cin)
	}
	if cin == nil {
		cin = bufio.NewReader(s.conn)
	}
	return p.intercept(s, t, rule, addr, cin, up)
}

// aLongTimeAgo is a deadline in the past: it interrupts a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// firstSpeaker waits until the client or the upstream sends something. It
// returns the client's first byte (clientFirst) or what the upstream sent
// first; either way the other side's pending read is interrupted, and what it
// had read kept (the client's in cin, the upstream's in upPre).
func firstSpeaker(client net.Conn, cin *bufio.Reader, up net.Conn) (first byte, clientFirst bool, upPre []byte, err error) {
	upc := make(chan []byte, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := up.Read(b)
		upc <- b[:n]
	}()
	cc := make(chan error, 1)
	go func() {
		_, err := cin.Peek(1)
		cc <- err
	}()
	select {
	case err = <-cc:
		up.SetReadDeadline(aLongTimeAgo)
		upPre = <-upc
		up.SetReadDeadline(time.Time{})
		if err != nil {
			return 0, false, upPre, err
		}
		b, _ := cin.Peek(1)
		return b[0], true, upPre, nil
	case upPre = <-upc:
		client.SetReadDeadline(aLongTimeAgo)
		<-cc
		client.SetReadDeadline(time.Time{})
		return 0, false, upPre, nil
	}
}

// readerConn is a connection whose reads come from r (what was read ahead,
// then the connection).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// countConn counts the bytes through a connection, both ways.
type countConn struct {
	net.Conn
	n atomic.Int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// intercept serves one connection to t as HTTP, putting secrets in (see above).
// It returns the bytes that went through it, both ways.
func (p *Proxy) intercept(s *session, t Target, rule, addr string, cin *bufio.Reader, up net.Conn) int64 {
	first, clientFirst, upPre, err := firstSpeaker(s.conn, cin, up)
	if err != nil {
		return int64(len(upPre))
	}
	isTLS := clientFirst && first == 0x16 // a TLS handshake record
	isHTTP := clientFirst && first >= 'A' && first <= 'Z'
	if !isTLS && !isHTTP {
		var n int64
		if len(upPre) > 0 {
			k, err := s.conn.Write(upPre)
			n += int64(k)
			if err != nil {
				return n
			}
		}
		return n + p.tunnel(s.conn, up, cin)
	}
	ic := &interception{p: p, s: s, t: t, rule: rule, addr: addr, scheme: "http"}
	var upConn net.Conn = up
	if len(upPre) > 0 {
		upConn = &readerConn{Conn: up, r: io.MultiReader(bytes.NewReader(upPre), up)}
	}
	ic.first.Store(&upConn)
	cc := &countConn{Conn: &readerConn{Conn: s.conn, r: cin}}
	var conn net.Conn = cc
	if isTLS {
		ic.scheme = "https"
		tc := tls.Server(cc, &tls.Config{
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.ca.Load().leaf(t.Host) },
			NextProtos:     []string{"h2", "http/1.1"},
			MinVersion:     tls.VersionTLS12,
		})
		s.conn.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
		err := tc.Handshake()
		s.conn.SetDeadline(time.Time{})
		if err != nil {
			p.log.Info("egress: TLS handshake with a sandboxed client failed (does it trust the node's CA bundle?)",
				"plugin", s.plugin.name, "server", s.server, "host", t.String(), "err", err)
			up.Close()
			return cc.n.Load()
		}
		conn = tc
	}
	ic.serve(conn)
	return cc.n.Load()
}

// interception is one intercepted client connection.
type interception struct {
	p      *Proxy
	s      *session
	t      Target
	rule   string
	addr   string
	scheme string // https when TLS was terminated, else http

	// first is the connection dialled for the CONNECT, used for the first
	// request; later ones dial again (the same decision and guard).
	first atomic.Pointer[net.Conn]
	mu    sync.Mutex
	ups   []net.Conn
	wg    sync.WaitGroup // handlers running
}

// oneConnListener is a listener that yields one connection, then waits to be closed.
type oneConnListener struct {
	c      net.Conn
	taken  atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.taken.CompareAndSwap(false, true) {
		return l.c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// serve runs the HTTP server for the one connection and returns once it and
// every request on it are done.
func (ic *interception) serve(conn net.Conn) {
	p := ic.p
	tr := &http.Transport{
		Proxy:       nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ic.dialUp(ctx) },
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := ic.dialUp(ctx)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, &tls.Config{ServerName: ic.t.Host, RootCAs: p.cfg.UpstreamRoots,
				NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		},
		ForceAttemptHTTP2:      true,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		ResponseHeaderTimeout:  p.cfg.ResponseTimeout,
		TLSHandshakeTimeout:    p.cfg.DialTimeout,
		MaxResponseHeaderBytes: int64(p.cfg.MaxHeaderBytes),
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = ic.scheme
			pr.Out.URL.Host = ic.t.String()
			pr.Out.Host = pr.In.Host
			// Forwarding headers pass as the client sent them; the proxy adds none.
			for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
		},
		Transport:      tr,
		ModifyResponse: ic.scrubResponse,
		ErrorHandler:   ic.upstreamError,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	ln := &oneConnListener{c: conn, closed: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ic.wg.Add(1)
			defer ic.wg.Done()
			ic.handle(w, r, rp)
		}),
		ReadHeaderTimeout: p.cfg.HeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    p.cfg.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		},
	}
	srv.Serve(ln)
	// Requests that began on the connection may still run (an upgraded one
	// relays until it ends); every one of them began before the connection was
	// closed or hijacked.
	ic.wg.Wait()
	tr.CloseIdleConnections()
	ic.mu.Lock()
	for _, c := range ic.ups {
		c.Close()
	}
	ic.mu.Unlock()
	if c := ic.first.Swap(nil); c != nil {
		(*c).Close()
	}
}

// dialUp is an upstream connection for the transport: the one dialled for the
// CONNECT first, then new ones to the same target through the same guard.
func (ic *interception) dialUp(ctx context.Context) (net.Conn, error) {
	if c := ic.first.Swap(nil); c != nil {
		return *c, nil
	}
	c, _, err := ic.p.dial(ctx, ic.t)
	if err != nil {
		return nil, err
	}
	ic.mu.Lock()
	ic.ups = append(ic.ups, c)
	ic.mu.Unlock()
	return c, nil
}

// putKey carries the secrets put into a request to its response.
type putKey struct{}

// handle is one request on an intercepted connection: it must be for the host
// the connection was allowed to; its sentinels must all be bound there; then its
// secrets are put in and it goes upstream.
func (ic *interception) handle(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	p, s, t := ic.p, ic.s, ic.t
	rules := s.plugin.rules.Load()
	if r.Method == http.MethodConnect {
		http.Error(w, "oz0 egress proxy: no CONNECT inside a connection the proxy reads\n", http.StatusMethodNotAllowed)
		return
	}
	pi := rules.inRequest(s.server, t, r.Header, r.URL, r.Host)
	if pi.stray != nil {
		code, why := p.strayRefused(s, t, ic.addr, pi.stray)
		http.Error(w, why, code)
		return
	}
	def := 80
	if ic.scheme == "https" {
		def = 443
	}
	if rt, err := ParseAuthority(r.Host, def); err != nil || rt.Host != t.Host || rt.Port != t.Port {
		// Another host's request on this connection (e.g. fronted through a
		// shared front end) would take this host's secrets elsewhere.
		p.record(s, t, "deny", ic.addr, "misdirected: a request for "+stripControl(r.Host)+" on a connection to "+t.String(), 0)
		http.Error(w, fmt.Sprintf("oz0 egress proxy: this connection was allowed to %s; a request for %q is not sent on it\n", t, r.Host), http.StatusMisdirectedRequest)
		return
	}
	out := r.Clone(r.Context())
	pi.apply(out.Header, out.URL)
	keys := pi.keys()
	if bs := rules.bodySecrets(s.server, t); len(bs) > 0 && r.Body != nil && r.Body != http.NoBody {
		var old, new [][]byte
		for _, b := range bs {
			old, new = append(old, []byte(b.Sentinel)), append(new, []byte(b.Value))
		}
		body, n, err := replacing(r.Body, r.ContentLength, old, new)
		if err != nil {
			http.Error(w, "oz0 egress proxy: request body: "+err.Error()+"\n", http.StatusBadRequest)
			return
		}
		out.Body, out.ContentLength = body, n
		if n < 0 {
			out.Header.Del("Content-Length")
		}
		for _, b := range bs {
			if !strings.Contains(keys, b.where()) {
				keys = strings.TrimPrefix(keys+", "+b.where()+" in the body where it occurs", ", ")
			}
		}
		pi.put = appendNew(pi.put, bs...)
	}
	if keys != "" {
		narrowEncodings(out.Header)
		p.record(s, t, "secret", ic.addr, "put in "+keys+" (bound: "+ic.rule+")", 0)
		out = out.WithContext(context.WithValue(out.Context(), putKey{}, pi.put))
	}
	rp.ServeHTTP(w, out)
}

func appendNew(to []*compiledSecret, more ...*compiledSecret) []*compiledSecret {
	for _, m := range more {
		found := false
		for _, x := range to {
			found = found || x == m
		}
		if !found {
			to = append(to, m)
		}
	}
	return to
}

// scrubResponse turns each bound secret's value back into its sentinel in a
// response on an intercepted connection (see scrubResponse).
func (ic *interception) scrubResponse(resp *http.Response) error {
	carried, _ := resp.Request.Context().Value(putKey{}).([]*compiledSecret)
	bound := ic.s.plugin.rules.Load().boundSecrets(ic.s.server, ic.t)
	return scrubResponse(resp, bound, len(carried) > 0)
}

// scrubResponse turns the value of each secret bound to the host back into its
// sentinel in a response's headers and body, so that neither a host echoing a
// credential nor one handing back a value a tool stored there earlier (a
// sentinel put into a field, say) gives the value to the sandbox. A gzip or
// deflate body is decoded to be checked, and passed on decoded. A request that
// carried a secret asked for nothing else (putIn.apply narrows its
// Accept-Encoding), so a body in another encoding is refused; for any other
// request it passes unchecked.
func scrubResponse(resp *http.Response, bound []*compiledSecret, carried bool) error {
	if len(bound) == 0 {
		return nil
	}
	for k, vs := range resp.Header {
		for i, v := range vs {
			for _, s := range bound {
				v = strings.ReplaceAll(v, s.Value, s.Sentinel)
			}
			vs[i] = v
		}
		resp.Header[k] = vs
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	body := resp.Body
	n := resp.ContentLength
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip", "deflate":
		var dec io.ReadCloser
		var err error
		if ce == "deflate" {
			dec, err = zlib.NewReader(body)
		} else {
			dec, err = gzip.NewReader(body)
		}
		if err != nil {
			return fmt.Errorf("the response's %s body cannot be read to check it for secrets: %w", ce, err)
		}
		body = struct {
			io.Reader
			io.Closer
		}{dec, resp.Body}
		n = -1
		resp.Header.Del("Content-Encoding")
	default:
		if carried {
			return fmt.Errorf("the host answered a request that carried a secret with a body encoded %q, which the proxy cannot check for the secret", ce)
		}
		return nil
	}
	var old, new [][]byte
	for _, s := range bound {
		old, new = append(old, []byte(s.Value)), append(new, []byte(s.Sentinel))
	}
	rb, n, err := replacing(body, n, old, new)
	if err != nil {
		return err
	}
	resp.Body, resp.ContentLength = rb, n
	resp.Header.Del("Content-Length")
	if n >= 0 {
		resp.Header.Set("Content-Length", fmt.Sprint(n))
	}
	return nil
}

// scrubbedError is an error whose text had the secrets taken out; it still
// unwraps to what it was (a GuardError, a certificate error).
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// upstreamError answers a request that could not be sent on: 403 when the
// address guard refused the host, 502 otherwise. The text is scrubbed of the
// secrets (a transport error quotes the URL it was sent to).
func (ic *interception) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	p, s, t := ic.p, ic.s, ic.t
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	msg := s.plugin.rules.Load().scrub(err.Error())
	var ge *GuardError
	if errors.As(err, &ge) {
		p.record(s, t, "deny", ge.Addr.String(), "address-guard "+ge.Addr.String(), 0)
		http.Error(w, fmt.Sprintf("oz0 egress proxy: plugin %s may not reach %s.\nRefused by the address guard: %v\n", s.plugin.name, t, ge), http.StatusForbidden)
		return
	}
	var ue *tls.CertificateVerificationError
	if errors.As(err, &ue) {
		msg = "its certificate is not trusted by the node (the host's own roots): " + msg
	}
	p.record(s, t, "error", ic.addr, ic.rule+": "+msg, 0)
	http.Error(w, fmt.Sprintf("oz0 egress proxy: %s is allowed but the request could not be sent on: %s\n", t, msg), http.StatusBadGateway)
}

// stripControl keeps text a client chose printable in an audit line.
func stripControl(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// strayRefused audits and reports a sentinel on its way to where its secret is
// not bound, and says what to answer the client.
func (p *Proxy) strayRefused(s *session, t Target, addr string, sec *compiledSecret) (int, string) {
	p.record(s, t, "deny", addr, "secret "+sec.where()+": its sentinel was sent to "+t.String()+", where it is not bound", 0)
	p.straySentinel(s, t, sec)
	return http.StatusForbidden, fmt.Sprintf("oz0 egress proxy: plugin %s may not send the secret %s to %s: it is bound to other hosts.\n"+
		"The request was refused and reported to the operator.\n", s.plugin.name, sec.where(), t)
}
