package mcpdoor_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/mcpdoor"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/peer"
)

// behind is what the daemon wires behind the doors, as the doors meet it: the
// gateway's check (tool rules, approvals), its observer (audit, traces) and its
// hooks, each counting what reached it.
type behind struct {
	checked, observed, hooked atomic.Int64
	mu                        sync.Mutex
	findings                  []api.Finding
}

func (b *behind) PreToolUse(context.Context, gateway.ToolCall) string { b.hooked.Add(1); return "" }
func (b *behind) PostToolUse(context.Context, gateway.ToolCall, *mcp.CallToolResult) string {
	return ""
}
func (b *behind) Session(context.Context, string, string) {}

func (b *behind) raise(f api.Finding) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.findings = append(b.findings, f)
}

// doors is a gateway with one plugin server (a real SDK server with the tools
// echo and refused) behind the doors of o, each served on its own unix socket in
// a temporary folder: the stdio door on stdio, the HTTP door on http.
type doors struct {
	b           *behind
	stdio, http string
	met         *metrics.Metrics // nil when the test gave its own Caps
}

func serve(t *testing.T, o mcpdoor.Options) *doors {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &behind{}
	gw := gateway.New(gateway.Options{
		Check: func(_ context.Context, c gateway.Call) gateway.Verdict {
			b.checked.Add(1)
			if c.Tool == "demo__refused" {
				return gateway.Verdict{Reason: "refused by the test's rule"}
			}
			return gateway.Verdict{OK: true}
		},
		Observe: func(*gateway.CallRecord) { b.observed.Add(1) },
		Hooks:   b,
	})
	srv := mcp.NewServer(&mcp.Implementation{Name: "demo", Version: "1"}, nil)
	for _, name := range []string{"echo", "refused"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := gw.Client("demo", "main").Connect(ctx, ct, gateway.SessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Attach(ctx, "demo", "main", cs); err != nil {
		t.Fatal(err)
	}
	o.Gateway, o.Raise = gw, b.raise
	var met *metrics.Metrics
	if o.Caps == nil {
		met = metrics.New()
		o.Caps = met.Caps()
	}
	if o.SessionCap == 0 {
		o.SessionCap, o.SessionCapPerClient = 100, 100
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = time.Minute
	}
	d := mcpdoor.New(o)
	dir := t.TempDir()
	out := &doors{b: b, stdio: filepath.Join(dir, "stdio.sock"), http: filepath.Join(dir, "http.sock"), met: met}
	sl, err := net.Listen("unix", out.stdio)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("unix", out.http)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: d.HTTP(), ConnContext: peer.WithConn}
	var wg sync.WaitGroup
	wg.Go(func() { d.ServeStdio(ctx, sl) })
	wg.Go(func() { d.Run(ctx) })
	go hs.Serve(hl)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		wg.Wait()
		ss.Close()
		cs.Close()
	})
	return out
}

// stdioClient is a client on the stdio door, its bytes relayed as `oz0-node mcp`
// relays them; first, if given, is the line it sends before its client's first.
func (d *doors) stdioClient(t *testing.T, first string) *mcp.ClientSession {
	t.Helper()
	c, err := net.Dial("unix", d.stdio)
	if err != nil {
		t.Fatal(err)
	}
	if first != "" {
		if _, err := io.WriteString(c, first+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	return connect(t, &mcp.IOTransport{Reader: c, Writer: c})
}

// httpClient is a client on the HTTP door.
func (d *doors) httpClient(t *testing.T) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.http)
	}}}
	return connect(t, &mcp.StreamableClientTransport{Endpoint: "http://localhost/", HTTPClient: hc, MaxRetries: -1})
}

func connect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// Every door hands its calls to what the daemon wired behind the gateway: each
// call is checked (a refused one answered as a tool error), observed and met by
// the hooks, unless its client forwards its own hooks (the agent-hooks marker).
func TestEveryDoorMeetsTheChecksObserversAndHooks(t *testing.T) {
	d := serve(t, mcpdoor.Options{})
	clients := []struct {
		name       string
		open       func(*testing.T) *mcp.ClientSession
		agentHooks bool
	}{
		{"stdio", func(t *testing.T) *mcp.ClientSession { return d.stdioClient(t, "") }, false},
		{"stdio --agent-hooks", func(t *testing.T) *mcp.ClientSession { return d.stdioClient(t, mcpdoor.AgentHooksPreamble) }, true},
		{"http", d.httpClient, false},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			cs := c.open(t)
			checked, observed, hooked := d.b.checked.Load(), d.b.observed.Load(), d.b.hooked.Load()
			if res := call(t, cs, "demo__echo"); res.IsError {
				t.Fatalf("demo__echo refused: %+v", res.Content)
			}
			res := call(t, cs, "demo__refused")
			if !res.IsError {
				t.Fatalf("demo__refused answered: %+v", res.Content)
			}
			if got := d.b.checked.Load() - checked; got != 2 {
				t.Errorf("checks: %d, want 2", got)
			}
			if got := d.b.observed.Load() - observed; got < 1 {
				t.Errorf("calls observed: %d, want at least the answered one", got)
			}
			want := int64(1) // the allowed call; the refused one meets no hook
			if c.agentHooks {
				want = 0
			}
			if got := d.b.hooked.Load() - hooked; got != want {
				t.Errorf("PreToolUse hooks run: %d, want %d", got, want)
			}
		})
	}
}

// Past the cap the stdio session idle longest is closed to make room, the
// newest and the busier ones stay, and the cap's finding says so.
func TestStdioSessionsPastTheCapCloseTheIdlest(t *testing.T) {
	d := serve(t, mcpdoor.Options{SessionCap: 2, SessionCapPerClient: 2})
	oldest := d.stdioClient(t, "")
	time.Sleep(10 * time.Millisecond)
	second := d.stdioClient(t, "")
	time.Sleep(10 * time.Millisecond)
	call(t, second, "demo__echo")
	third := d.stdioClient(t, "")
	ended := make(chan struct{})
	go func() { oldest.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session idle longest was not closed past the cap")
	}
	call(t, second, "demo__echo")
	call(t, third, "demo__echo")
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if len(d.b.findings) == 0 || d.b.findings[0].Code != api.CodeSessionCap {
		t.Errorf("findings %+v; want %s", d.b.findings, api.CodeSessionCap)
	}
}

// metric reads one sample of the doors' metrics (0 when absent).
func (d *doors) metric(t *testing.T, sample string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	d.met.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
