package daemon

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/sandbox"
)

// launchRemote connects to a remote MCP server. No plugin code runs, so there is
// no sandbox: the node is the client, and every connection it makes goes through
// the plugin's egress endpoint with CONNECT, so the same decision (the URL's host
// as the manifest's entry, the tenant's list), the address guard at dial time, the
// audit log and the counts apply as to a sandboxed server's own connections.
func (d *Daemon) launchRemote(ctx context.Context, p *plan.Plugin, s *manifest.Server, stderr io.Writer) (*mcpSession, error) {
	plugin, server := p.Installed.Name, s.Name
	if d.cfg.Egress == nil {
		return nil, fmt.Errorf("server %s/%s is remote and the node runs no egress proxy to reach it through", plugin, server)
	}
	hc := remoteClient(d.remoteSocket(plugin, server), s.Remote.Headers,
		replyLimits{max: d.maxResult(), tooLarge: d.resultTooLarge(plugin, server), notes: d.noteLimiter(plugin, server)})
	var tr mcp.Transport
	switch s.Remote.Type {
	case manifest.RemoteSSE:
		tr = &mcp.SSEClientTransport{Endpoint: s.Remote.URL, HTTPClient: hc}
	default:
		tr = &mcp.StreamableClientTransport{Endpoint: s.Remote.URL, HTTPClient: hc, MaxRetries: -1}
	}
	// The SSE transport keeps its event stream on the context it connects with, so
	// that is the server's own (it ends when the server is stopped); the client's
	// dial and response-header timeouts bound a server that does not answer.
	cs, err := d.gw.Client(plugin, server).Connect(ctx, tr, gateway.SessionOptions())
	if err != nil {
		// The URL and headers may carry the operator's secrets, and the client's
		// errors quote the URL: what is shown and logged has them redacted.
		err = fmt.Errorf("server %s/%s: connect to remote %s server at %s: %s", plugin, server, s.Remote.Type, hostOf(s.Remote.URL), p.Redact(err.Error()))
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	return &mcpSession{cs: cs}, nil
}

// remoteSocket is the egress endpoint a remote server's connections go through:
// the server's own, whose list is its URL's host alone and whose audit lines
// name it.
func (d *Daemon) remoteSocket(plugin, server string) string {
	return filepath.Join(d.cfg.Node.Dir.EgressServerSocketDir(plugin, server), sandbox.ProxySocket)
}

func hostOf(raw string) string {
	if u, err := manifest.ParseRemoteURL(raw); err == nil {
		return u.Host
	}
	return "its URL"
}

// replyLimits bound a remote server's replies: max each (0: DefaultMaxResult),
// tooLarge told of each one over it, and notes its notifications (nil: not
// bounded).
type replyLimits struct {
	max      int
	tooLarge func(id string, size int)
	notes    *noteLimiter
}

// remoteClient is an HTTP client whose every connection is a CONNECT tunnel
// through the egress socket, that sends the server's headers, that never
// follows a redirect (a redirect elsewhere would carry the headers, the operator's
// secrets, to a host the plugin did not name), and whose replies are bounded.
func remoteClient(socket string, headers map[string]string, lim replyLimits) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           egressDial(socket),
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
	return &http.Client{
		Transport: &replyTransport{max: cmp.Or(lim.max, DefaultMaxResult), tooLarge: lim.tooLarge, notes: lim.notes,
			next: &headerTransport{headers: headers, next: tr}},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// EgressRefusal is the proxy's answer to a connection it did not allow.
type EgressRefusal struct {
	Status int
	Why    string
}

func (e *EgressRefusal) Error() string {
	return fmt.Sprintf("egress proxy refused (%d): %s", e.Status, e.Why)
}

// egressDial opens a tunnel to addr through the proxy's unix socket.
func egressDial(socket string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, fmt.Errorf("egress proxy %s: %w", socket, err)
		}
		dl := time.Now().Add(30 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		c.SetDeadline(dl)
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
			c.Close()
			return nil, fmt.Errorf("egress proxy: CONNECT %s: %w", addr, err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("egress proxy: CONNECT %s: %w", addr, err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			c.Close()
			return nil, &EgressRefusal{Status: resp.StatusCode, Why: strings.TrimSpace(string(b))}
		}
		c.SetDeadline(time.Time{})
		if br.Buffered() > 0 {
			return &bufferedConn{Conn: c, r: br}, nil
		}
		return c, nil
	}
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// headerTransport sends a remote server's headers with every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}
