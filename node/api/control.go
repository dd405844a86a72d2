package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Provider is what the control API serves; the running node implements it.
type Provider interface {
	Status() *Status
	// Subscribe streams events; the first is always a full status.
	Subscribe() (<-chan Event, func())
	Restart(plugin, server string) error
	Logs(plugin, server string, n int) ([]string, error)
	Follow(plugin, server string) (<-chan string, func(), error)
}

// HookProvider is a Provider that also runs the hooks of an agent's event.
type HookProvider interface {
	// AgentHook runs the hooks a Claude Code hook payload reaches and merges
	// their answers.
	AgentHook(ctx context.Context, payload []byte) (*HookAnswer, error)
}

// MaxHookPayload bounds a hook payload the control API accepts.
const MaxHookPayload = 8 << 20

// NodeLogger is a Provider that also keeps the node's own log (GET /v1/logs).
type NodeLogger interface {
	NodeLogs(n int) []string
	FollowNodeLogs() (<-chan string, func())
}

// SecretEqual reports whether two secrets (a bearer token, a proxy credential) are
// equal, in a time that depends on neither how much of them matches nor their
// lengths: both are hashed to a fixed size, then compared in constant time.
func SecretEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// ListenUnix listens on a socket only its owner can use: created under umask 077,
// chmod 0600, a stale socket from a dead node removed first (a live one is an error).
func ListenUnix(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen %s: another node is serving it", path)
	}
	os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return ln, nil
}

// Handler serves the control API:
//
//	GET  /v1/status                               the status model
//	GET  /v1/events                               newline-delimited JSON events (first: a status)
//	POST /v1/servers/{plugin}/{server}/restart    restart a server
//	GET  /v1/servers/{plugin}/{server}/logs?n=N   its last stderr lines (&follow=1 streams)
//	GET  /v1/logs?n=N                             the node's own last log lines (&follow=1 streams)
//	GET  /v1/health                               200 while the node runs
//	POST /v1/hooks                                run an agent's hook event (body: its payload)
func Handler(p Provider) http.Handler {
	mux := http.NewServeMux()
	if hp, ok := p.(HookProvider); ok {
		mux.HandleFunc("POST /v1/hooks", func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, MaxHookPayload+1))
			if err != nil || len(body) > MaxHookPayload {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "hook payload unreadable or too large"})
				return
			}
			a, err := hp.AgentHook(r.Context(), body)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, a)
		})
	}
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.Status())
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		events, cancel := p.Subscribe()
		defer cancel()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		fl, _ := w.(http.Flusher)
		if fl != nil {
			fl.Flush() // the client returns from Events now, not at the first event
		}
		enc := json.NewEncoder(w)
		for {
			select {
			case <-r.Context().Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if err := enc.Encode(ev); err != nil {
					return
				}
				if fl != nil {
					fl.Flush()
				}
			}
		}
	})
	mux.HandleFunc("POST /v1/servers/{plugin}/{server}/restart", func(w http.ResponseWriter, r *http.Request) {
		if err := p.Restart(r.PathValue("plugin"), r.PathValue("server")); err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "restarting"})
	})
	mux.HandleFunc("GET /v1/servers/{plugin}/{server}/logs", func(w http.ResponseWriter, r *http.Request) {
		plugin, server := r.PathValue("plugin"), r.PathValue("server")
		lines, err := p.Logs(plugin, server, logCount(r))
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		}
		serveLines(w, r, lines, func() (<-chan string, func(), error) { return p.Follow(plugin, server) })
	})
	if nl, ok := p.(NodeLogger); ok {
		mux.HandleFunc("GET /v1/logs", func(w http.ResponseWriter, r *http.Request) {
			serveLines(w, r, nl.NodeLogs(logCount(r)), func() (<-chan string, func(), error) {
				c, cancel := nl.FollowNodeLogs()
				return c, cancel, nil
			})
		})
	}
	return mux
}

func logCount(r *http.Request) int {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	if n <= 0 || n > 10000 {
		n = 100
	}
	return n
}

// serveLines answers a logs request: the lines as JSON, or with follow=1 as text,
// then each new line as it comes.
func serveLines(w http.ResponseWriter, r *http.Request, lines []string, follow func() (<-chan string, func(), error)) {
	if r.URL.Query().Get("follow") == "" {
		writeJSON(w, http.StatusOK, map[string]any{"lines": nonNil(lines)})
		return
	}
	c, cancel, err := follow()
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	}
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fl, _ := w.(http.Flusher)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if fl != nil {
		fl.Flush()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case l, ok := <-c:
			if !ok {
				return // the log ended (server removed or node stopping)
			}
			fmt.Fprintln(w, l)
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Client talks to a node's control socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client for the control socket at path.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{Socket: socket, hc: &http.Client{Transport: tr}}
}

// ErrNotRunning means nothing answers on the control socket.
var ErrNotRunning = errors.New("the node is not running")

func (c *Client) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://oz0-node"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w (control socket %s: %v)", ErrNotRunning, c.Socket, err)
		}
		return nil, err
	}
	return resp, nil
}

func decode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
		return fmt.Errorf("control API: %s: %s", resp.Status, e.Error)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Status fetches the status model.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/status")
	if err != nil {
		return nil, err
	}
	var st Status
	if err := decode(resp, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Restart asks the node to restart a server.
func (c *Client) Restart(ctx context.Context, plugin, server string) error {
	resp, err := c.do(ctx, http.MethodPost, serverPath(plugin, server)+"/restart")
	if err != nil {
		return err
	}
	var out map[string]string
	return decode(resp, &out)
}

// Logs fetches a server's last n stderr lines.
func (c *Client) Logs(ctx context.Context, plugin, server string, n int) ([]string, error) {
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("%s/logs?n=%d", serverPath(plugin, server), n))
	if err != nil {
		return nil, err
	}
	var out struct {
		Lines []string `json:"lines"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, err
	}
	return out.Lines, nil
}

// serverPath is the API path of one server, its names escaped.
func serverPath(plugin, server string) string {
	return "/v1/servers/" + url.PathEscape(plugin) + "/" + url.PathEscape(server)
}

// Follow streams a server's stderr lines — its last backlog lines first, then each
// new one — until ctx ends or the node closes the stream.
func (c *Client) Follow(ctx context.Context, plugin, server string, backlog int) (<-chan string, error) {
	out, err := c.follow(ctx, fmt.Sprintf("%s/logs?follow=1&n=%d", serverPath(plugin, server), backlog))
	if err != nil {
		return nil, fmt.Errorf("follow %s/%s: %w", plugin, server, err)
	}
	return out, nil
}

// NodeLogs fetches the node's own last n log lines.
func (c *Client) NodeLogs(ctx context.Context, n int) ([]string, error) {
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/logs?n=%d", n))
	if err != nil {
		return nil, err
	}
	var out struct {
		Lines []string `json:"lines"`
	}
	if err := decode(resp, &out); err != nil {
		return nil, fmt.Errorf("node log: %w", err)
	}
	return out.Lines, nil
}

// FollowNode streams the node's own log as Follow does a server's.
func (c *Client) FollowNode(ctx context.Context, backlog int) (<-chan string, error) {
	out, err := c.follow(ctx, fmt.Sprintf("/v1/logs?follow=1&n=%d", backlog))
	if err != nil {
		return nil, fmt.Errorf("follow the node's log: %w", err)
	}
	return out, nil
}

func (c *Client) follow(ctx context.Context, path string) (<-chan string, error) {
	resp, err := c.do(ctx, http.MethodGet, path)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var none struct{}
		return nil, decode(resp, &none)
	}
	out := make(chan string, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case out <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Events streams the node's events until ctx ends or the node goes away; the
// channel is closed then.
func (c *Client) Events(ctx context.Context) (<-chan Event, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/events")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("control API events: %s", resp.Status)
	}
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				continue // an event this client does not know: skip, never crash
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Hook hands an agent's hook payload to the node, which runs the hooks it reaches
// and answers with their merged answer.
func (c *Client) Hook(ctx context.Context, payload []byte) (*HookAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://oz0-node/v1/hooks", bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w (control socket %s: %v)", ErrNotRunning, c.Socket, err)
		}
		return nil, err
	}
	var a HookAnswer
	if err := decode(resp, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Approvals lists the requests waiting for an operator's answer.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/approvals")
	if err != nil {
		return nil, err
	}
	var out []Approval
	if err := decode(resp, &out); err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return out, nil
}

// Answer answers approval id with AnswerOnce, AnswerAlways or AnswerDeny; via
// says from where (tui, cli) in the audit line. Only the control socket's owner
// may answer.
func (c *Client) Answer(ctx context.Context, id, answer, via string) error {
	body, _ := json.Marshal(map[string]string{"answer": answer, "via": via})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://oz0-node/v1/approvals/"+url.PathEscape(id), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (control socket %s: %v)", ErrNotRunning, c.Socket, err)
		}
		return err
	}
	var out map[string]string
	if err := decode(resp, &out); err != nil {
		return fmt.Errorf("answer approval %s: %w", id, err)
	}
	return nil
}

// Audit fetches the audit stream's last n lines, oldest first.
func (c *Client) Audit(ctx context.Context, n int) ([]AuditRecord, error) {
	resp, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/audit?n=%d", n))
	if err != nil {
		return nil, err
	}
	var out []AuditRecord
	if err := decode(resp, &out); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}
