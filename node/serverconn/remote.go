package serverconn

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/manifest"
)

// Remote is the transport to a remote MCP server. No plugin code runs, so there
// is no sandbox: the node is the client, and every connection it makes goes
// through socket, the egress endpoint of the plugin's server, with CONNECT, so
// the same decision (the URL's host as the manifest's entry, the tenant's list),
// the address guard at dial time, the audit log and the counts apply as to a
// sandboxed server's own connections.
func Remote(r *manifest.Remote, socket string, lim Limits) mcp.Transport {
	hc := RemoteClient(socket, r.Headers, lim)
	if r.Type == manifest.RemoteSSE {
		return &mcp.SSEClientTransport{Endpoint: r.URL, HTTPClient: hc}
	}
	return &mcp.StreamableClientTransport{Endpoint: r.URL, HTTPClient: hc, MaxRetries: -1}
}

// Limits bound a remote server's replies: Max each (0: DefaultMaxResult),
// TooLarge told of each one over it, and Notes its notifications (nil: not
// bounded). Progress, if set, takes the progress of the gateway's calls as the
// server's event streams are read.
type Limits struct {
	Max      int
	TooLarge func(id string, size int)
	Notes    *NoteLimiter
	Progress *ProgressWatch
}

// RemoteClient is an HTTP client whose every connection is a CONNECT tunnel
// through the egress socket, that sends the server's headers, that never
// follows a redirect (a redirect elsewhere would carry the headers, the operator's
// secrets, to a host the plugin did not name), and whose replies are bounded.
func RemoteClient(socket string, headers map[string]string, lim Limits) *http.Client {
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
		Transport: &replyTransport{max: cmp.Or(lim.Max, DefaultMaxResult), tooLarge: lim.TooLarge, notes: lim.Notes,
			progress: lim.Progress, next: &headerTransport{headers: headers, next: tr}},
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
