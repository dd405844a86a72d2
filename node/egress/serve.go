package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// serveConn sniffs the first byte: 0x05 opens a SOCKS5 handshake, anything else is
// read as HTTP.
//
// On a unix socket the first read also takes any descriptors sent with it: a
// bridge's listener handoff is served as such, and descriptors sent with anything
// else are closed at once.
func (p *Proxy) serveConn(s *session) {
	c := s.conn
	c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	var r io.Reader = c
	if uc, ok := c.(*net.UnixConn); ok {
		first, fds, err := readFirstUnix(uc)
		if len(first) > 0 && first[0] == handoffMagic[0] {
			p.serveControl(s, uc, first, fds)
			return
		}
		closeFDs(fds)
		if err != nil {
			return
		}
		r = io.MultiReader(bytes.NewReader(first), c)
	}
	lr := &io.LimitedReader{R: r, N: int64(p.cfg.MaxHeaderBytes)}
	br := bufio.NewReader(lr)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		p.serveSOCKS(s, br, lr)
		return
	}
	p.serveHTTP(s, br, lr)
}

func (p *Proxy) serveHTTP(s *session, br *bufio.Reader, lr *io.LimitedReader) {
	c := s.conn
	for n := 0; ; n++ {
		if n > 0 {
			// Idle between requests, then the header timeout once one starts.
			lr.N = int64(p.cfg.MaxHeaderBytes)
			c.SetReadDeadline(time.Now().Add(p.cfg.IdleTimeout))
			if _, err := br.Peek(1); err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
		}
		// Bytes already buffered count against the header limit.
		lr.N = int64(p.cfg.MaxHeaderBytes - br.Buffered())
		req, err := http.ReadRequest(br)
		if err != nil {
			var ne net.Error
			switch {
			case lr.N <= 0:
				p.writeError(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("oz0 egress proxy: request headers longer than %d bytes\n", p.cfg.MaxHeaderBytes))
			case errors.As(err, &ne) && ne.Timeout():
				p.writeError(c, http.StatusRequestTimeout, "oz0 egress proxy: request headers not received in time\n")
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			default:
				p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: malformed request: "+err.Error()+"\n")
			}
			return
		}
		c.SetReadDeadline(time.Time{})
		lr.N = math.MaxInt64 // the body is not bounded by the header limit
		if req.ProtoMajor != 1 {
			p.writeError(c, http.StatusHTTPVersionNotSupported, "oz0 egress proxy: only HTTP/1.x requests are proxied\n")
			return
		}
		// Every request on a host-loopback endpoint carries the credential, as
		// clients send it with each one.
		if s.cred != nil {
			switch h := req.Header.Get("Proxy-Authorization"); {
			case h == "":
				p.proxyAuthRequired(s, c, "the request carries no Proxy-Authorization")
				return
			case !s.cred.basicOK(h):
				p.proxyAuthRequired(s, c, "the request's Proxy-Authorization is not this endpoint's credential")
				return
			}
		}
		if req.Method == http.MethodConnect {
			p.serveConnect(s, req, br)
			return
		}
		if !p.serveForward(s, req) {
			return
		}
	}
}

// writeError answers with a plain-text body and ends the connection. It half-closes
// and briefly drains first: closing a socket with unread input sends a reset, which
// can destroy the answer before the client reads it.
func (p *Proxy) writeError(c net.Conn, code int, body string) {
	p.writeErrorHeader(c, code, "", body)
}

// writeErrorHeader is writeError with extra header lines (each ending in CRLF).
func (p *Proxy) writeErrorHeader(c net.Conn, code int, header, body string) {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), header, len(body), body)
	if cw, ok := c.(closeWriter); ok && err == nil && cw.CloseWrite() == nil {
		c.SetReadDeadline(time.Now().Add(lingerTime))
		io.CopyN(io.Discard, c, lingerBytes)
	}
}

const (
	lingerTime  = 250 * time.Millisecond
	lingerBytes = 256 << 10
)

// check takes the list decision for a target of this session. The target is
// registered first, so a rules change racing with the decision still sees it.
func (p *Proxy) check(s *session, t Target, cancel context.CancelFunc) verdict {
	s.setTarget(&t, cancel)
	r := s.plugin.rules.Load()
	// A sentinel in the name itself (a label under an allowed suffix) is carried
	// to that name's servers: it goes nowhere its secret is bound.
	if found := r.sentinelsIn(t.Host); len(found) > 0 {
		s.setTarget(nil, nil)
		_, why := p.strayRefused(s, t, "", found[0])
		return verdict{rule: "secret", why: why}
	}
	v := decide(r, s.server, p.tenant.Load(), t, p.guard.operatorAllows)
	if !v.allow && v.askable && p.cfg.Ask != nil {
		v = p.ask(s, t, cancel, v)
	}
	if !v.allow {
		s.setTarget(nil, nil)
		p.record(s, t, "deny", "", v.rule, 0)
	}
	return v
}

func (p *Proxy) serveConnect(s *session, req *http.Request, br *bufio.Reader) {
	c := s.conn
	t, err := ParseAuthority(req.RequestURI, 0)
	if err != nil {
		p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: CONNECT target: "+err.Error()+"\n")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The CONNECT's own headers carry nothing to the host; a sentinel in them is
	// on its way somewhere it is not put in.
	if pi := s.plugin.rules.Load().inRequest(s.server, Target{}, req.Header, nil, ""); pi.stray != nil || len(pi.put) > 0 {
		sec := pi.stray
		if sec == nil {
			sec = pi.put[0]
		}
		code, why := p.strayRefused(s, t, "", sec)
		p.writeError(c, code, why)
		return
	}
	v := p.check(s, t, cancel)
	if !v.allow {
		p.writeError(c, http.StatusForbidden, v.why)
		return
	}
	up, addr, err := p.dial(ctx, t)
	if err != nil {
		p.dialFailed(s, t, addr, v, err, func(code int, body string) { p.writeError(c, code, body) })
		return
	}
	if !s.attach(up) {
		up.Close()
		p.record(s, t, "end", addr.String(), s.killedWhy(), 0)
		return
	}
	p.record(s, t, "allow", addr.String(), v.rule, 0)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		p.record(s, t, "end", addr.String(), v.rule, 0)
		return
	}
	n := p.relay(s, t, v.rule, addr.String(), br, up)
	p.record(s, t, "end", addr.String(), endRule(s, v.rule), n)
}

// dialFailed reports a dial that did not happen: a guard refusal is a denial (403 /
// SOCKS "not allowed"), anything else an error (502 / "host unreachable").
func (p *Proxy) dialFailed(s *session, t Target, addr netip.Addr, v verdict, err error, answer func(code int, body string)) {
	as := ""
	if addr.IsValid() {
		as = addr.String()
	}
	s.setTarget(nil, nil)
	var ge *GuardError
	if errors.As(err, &ge) {
		p.record(s, t, "deny", ge.Addr.String(), "address-guard "+ge.Addr.String(), 0)
		answer(http.StatusForbidden, fmt.Sprintf("oz0 egress proxy: plugin %s may not reach %s.\nRefused by the address guard: %v; no list can allow it (only the operator's --egress-allow-cidr can).\n", s.plugin.name, t, ge))
		return
	}
	if why := s.killedWhy(); why != "" {
		p.record(s, t, "end", as, why, 0)
		return
	}
	p.record(s, t, "error", as, v.rule+": "+err.Error(), 0)
	answer(http.StatusBadGateway, fmt.Sprintf("oz0 egress proxy: %s is allowed but could not be reached: %v\n", t, err))
}

func endRule(s *session, rule string) string {
	if why := s.killedWhy(); why != "" && why != "proxy closed" {
		return why
	}
	return rule
}

// tunnel copies both ways until both sides are done, half-closing each direction as
// its source ends. Bytes already read past the request (buffered in br) go first.
// The copies run between the raw connections so the kernel can splice.
func (p *Proxy) tunnel(client, up net.Conn, br *bufio.Reader) int64 {
	var up2 int64
	if br != nil && br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		n, err := up.Write(b)
		up2 += int64(n)
		if err != nil {
			return up2
		}
	}
	var wg sync.WaitGroup
	var toUp int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		toUp = pipe(up, client)
	}()
	down := pipe(client, up)
	wg.Wait()
	client.Close()
	up.Close()
	return up2 + toUp + down
}

type closeWriter interface{ CloseWrite() error }

// pipe copies src to dst; on a clean end of src it half-closes dst, on an error it
// closes both so the other direction ends too.
func pipe(dst, src net.Conn) int64 {
	n, err := io.Copy(dst, src)
	if err != nil {
		dst.Close()
		src.Close()
		return n
	}
	if cw, ok := dst.(closeWriter); ok {
		if cw.CloseWrite() != nil {
			dst.Close()
		}
	} else {
		dst.Close()
	}
	return n
}

// hopHeaders are per-connection headers a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func (p *Proxy) newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil, // never chain to the node's own proxy settings
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t, err := ParseAuthority(addr, 0)
			if err != nil {
				return nil, err
			}
			c, _, err := p.dial(ctx, t)
			return c, err
		},
		TLSClientConfig:        &tls.Config{RootCAs: p.cfg.UpstreamRoots},
		DisableCompression:     true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		ResponseHeaderTimeout:  p.cfg.ResponseTimeout,
		TLSHandshakeTimeout:    p.cfg.DialTimeout,
		MaxResponseHeaderBytes: int64(p.cfg.MaxHeaderBytes),
	}
}

// serveForward relays one absolute-form request. Redirects are returned to the
// client, never followed. It reports whether the connection may carry another.
func (p *Proxy) serveForward(s *session, req *http.Request) bool {
	c := s.conn
	if !req.URL.IsAbs() || req.URL.Host == "" {
		p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port\n")
		return false
	}
	def := 0
	switch req.URL.Scheme {
	case "http":
		def = 80
	case "https":
		def = 443
	default:
		p.writeError(c, http.StatusBadRequest, fmt.Sprintf("oz0 egress proxy: scheme %q is not proxied; use http, https or CONNECT\n", req.URL.Scheme))
		return false
	}
	if req.URL.User != nil {
		p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: user info in the request URL is not allowed\n")
		return false
	}
	t, err := ParseAuthority(req.URL.Host, def)
	if err != nil {
		p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: request host: "+err.Error()+"\n")
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := p.check(s, t, cancel)
	if !v.allow {
		p.writeError(c, http.StatusForbidden, v.why)
		return false
	}
	defer s.setTarget(nil, nil)
	rules := s.plugin.rules.Load()
	pi := rules.inRequest(s.server, t, req.Header, req.URL, req.Host)
	if pi.stray != nil {
		code, why := p.strayRefused(s, t, "", pi.stray)
		p.writeError(c, code, why)
		return false
	}

	var addr netip.Addr
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		if ap, err := netip.ParseAddrPort(ci.Conn.RemoteAddr().String()); err == nil {
			addr = ap.Addr().Unmap()
		}
	}}
	u := *req.URL
	u.Host = t.String()
	out := &http.Request{
		Method: req.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: req.Header.Clone(), Body: req.Body, ContentLength: req.ContentLength,
		Host: req.Host,
	}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	stripHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // do not add Go's
	}
	if req.ContentLength == 0 && len(req.TransferEncoding) == 0 {
		out.Body = nil
	}
	pi.apply(out.Header, out.URL)
	keys := pi.keys()
	if bs := rules.bodySecrets(s.server, t); len(bs) > 0 && out.Body != nil {
		var old, new [][]byte
		for _, b := range bs {
			old, new = append(old, []byte(b.Sentinel)), append(new, []byte(b.Value))
			keys = strings.TrimPrefix(keys+", "+b.where()+" in the body where it occurs", ", ")
		}
		nb, n, err := replacing(out.Body, out.ContentLength, old, new)
		if err != nil {
			p.writeError(c, http.StatusBadRequest, "oz0 egress proxy: request body: "+err.Error()+"\n")
			return false
		}
		out.Body, out.ContentLength = nb, n
		if n < 0 {
			out.Header.Del("Content-Length")
		}
		pi.put = appendNew(pi.put, bs...)
	}
	if keys != "" {
		narrowEncodings(out.Header)
	}
	body := &countReader{r: out.Body}
	if out.Body != nil {
		out.Body = body
	}
	resp, err := p.transport.RoundTrip(out.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if err != nil {
		err = &scrubbedError{msg: rules.scrub(err.Error()), err: err}
		p.dialFailed(s, t, addr, v, err, func(code int, b string) { p.writeError(c, code, b) })
		return false
	}
	defer resp.Body.Close()
	p.record(s, t, "allow", addrString(addr), v.rule, 0)
	if keys != "" {
		p.record(s, t, "secret", addrString(addr), "put in "+keys+" (bound: "+v.rule+")", 0)
	}
	if err := scrubResponse(resp, rules.boundSecrets(s.server, t), keys != ""); err != nil {
		p.writeError(c, http.StatusBadGateway, "oz0 egress proxy: response: "+rules.scrub(err.Error())+"\n")
		return false
	}
	stripHop(resp.Header)
	// A request body the upstream did not read to the end would be taken for the
	// next request; and the transport may still be reading it. Such connections
	// are not reused.
	keep := !req.Close && !resp.Close && req.ProtoAtLeast(1, 1) && out.Body == nil
	resp.Close = !keep
	cw := &countWriter{w: c}
	err = resp.Write(cw)
	p.record(s, t, "end", addrString(addr), endRule(s, v.rule), cw.n+body.n)
	return keep && err == nil && s.killedWhy() == ""
}

func addrString(a netip.Addr) string {
	if a.IsValid() {
		return a.String()
	}
	return ""
}

type countReader struct {
	r io.ReadCloser
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countReader) Close() error { return c.r.Close() }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
