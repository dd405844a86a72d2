package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
)

// pluginServer is a real MCP server standing in for one plugin server: its echo
// tool answers with its own name and the arguments it got, and it counts calls.
type pluginServer struct {
	name  string
	calls atomic.Int32
	srv   *mcp.Server
}

func newPluginServer(name string, tools ...string) *pluginServer {
	p := &pluginServer{name: name}
	p.srv = mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	for _, tool := range tools {
		p.srv.AddTool(&mcp.Tool{Name: tool, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				p.calls.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s/%s %s", p.name, tool, req.Params.Arguments)}}}, nil
			})
	}
	return p
}

// attachInMemory connects the gateway to s over the SDK's in-memory transport, as
// it connects to a plugin server, and attaches its tools.
func attachInMemory(t *testing.T, g *Gateway, plugin, server string, s *pluginServer) {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := g.Client(plugin, server).Connect(ctx, ct, SessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := g.Attach(ctx, plugin, server, cs); err != nil {
		t.Fatal(err)
	}
}

// attachLoopback serves s with Streamable HTTP on a loopback port and attaches it
// through the SDK's HTTP client transport.
func attachLoopback(t *testing.T, g *Gateway, plugin, server string, s *pluginServer) {
	t.Helper()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, nil))
	t.Cleanup(hs.Close)
	cs, err := g.Client(plugin, server).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, SessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := g.Attach(context.Background(), plugin, server, cs); err != nil {
		t.Fatal(err)
	}
}

// caller connects an MCP client to the gateway's server, as `oz0-node mcp` does.
func caller(t *testing.T, g *Gateway) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tool.Name)
	}
	slices.Sort(out)
	return out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Tools are offered under <plugin>__<tool> and each call reaches the server that
// offers it, whatever the transport: two plugins may both have an echo.
// Arguments arrive as sent; no arguments arrive as an empty object.
func TestGatewayRoutesEachNamespacedToolToItsServer(t *testing.T) {
	g := New(Options{})
	alpha := newPluginServer("alpha-main", "echo", "add")
	beta := newPluginServer("beta-main", "echo")
	attachInMemory(t, g, "alpha", "main", alpha)
	attachLoopback(t, g, "beta", "main", beta)
	cs := caller(t, g)

	if got, want := toolNames(t, cs), []string{"alpha__add", "alpha__echo", "beta__echo"}; !slices.Equal(got, want) {
		t.Fatalf("tools %q, want %q", got, want)
	}
	if got := g.Tools("alpha", "main"); !slices.Equal(got, []string{"alpha__add", "alpha__echo"}) {
		t.Errorf("Tools(alpha, main) = %q", got)
	}
	for _, c := range []struct{ tool, args, want string }{
		{"alpha__echo", `{"x":1}`, `alpha-main/echo {"x":1}`},
		{"beta__echo", `{"y":"z"}`, `beta-main/echo {"y":"z"}`},
		{"alpha__add", ``, `alpha-main/add {}`},
	} {
		p := &mcp.CallToolParams{Name: c.tool}
		if c.args != "" {
			p.Arguments = json.RawMessage(c.args)
		}
		res, err := cs.CallTool(context.Background(), p)
		if err != nil || res.IsError || text(res) != c.want {
			t.Errorf("call %s: %v %q, want %q", c.tool, err, text(res), c.want)
		}
	}
	if alpha.calls.Load() != 2 || beta.calls.Load() != 1 {
		t.Errorf("calls reached alpha %d, beta %d; want 2 and 1", alpha.calls.Load(), beta.calls.Load())
	}
}

// A tool name another server of the same plugin already offers is refused with a
// finding, and calls keep reaching the first server.
func TestGatewayRefusesACollidingTool(t *testing.T) {
	var mu sync.Mutex
	var findings []api.Finding
	got := make(chan struct{}, 4)
	g := New(Options{OnFinding: func(f api.Finding) {
		mu.Lock()
		findings = append(findings, f)
		mu.Unlock()
		got <- struct{}{}
	}})
	first := newPluginServer("first", "echo")
	second := newPluginServer("second", "echo", "other")
	attachInMemory(t, g, "p", "one", first)
	attachInMemory(t, g, "p", "two", second)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no finding for the colliding tool")
	}
	mu.Lock()
	f := findings[0]
	mu.Unlock()
	if f.Code != api.CodeToolCollision || f.Subject != "p__echo" || !strings.Contains(f.Message, "p/two") || !strings.Contains(f.Message, "p/one") {
		t.Errorf("finding %+v: want a tool collision of p__echo naming both servers", f)
	}
	if got := g.Tools("p", "two"); !slices.Equal(got, []string{"p__other"}) {
		t.Errorf("second server serves %q, want only p__other", got)
	}
	cs := caller(t, g)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "p__echo"})
	if err != nil || !strings.HasPrefix(text(res), "first/echo") || second.calls.Load() != 0 {
		t.Errorf("call of the collided tool: %v %q, second server called %d times", err, text(res), second.calls.Load())
	}
}

// Every call asks the policy first: a refused plugin's call answers with the
// refusal as a tool error and never reaches its server. A stopped server's tools
// leave the list, and their calls answer why, not "unknown tool".
func TestGatewayAsksThePolicyAndExplainsStoppedServers(t *testing.T) {
	var refuse atomic.Bool
	var outcomes []string
	var mu sync.Mutex
	g := New(Options{
		Check: func(_ context.Context, c Call) Verdict {
			if refuse.Load() && c.Plugin == "p" {
				return Verdict{Reason: "plugin p is exempt no more"}
			}
			return Verdict{OK: true}
		},
		OnCall: func(plugin, outcome string, _ time.Duration) {
			mu.Lock()
			outcomes = append(outcomes, plugin+" "+outcome)
			mu.Unlock()
		},
	})
	s := newPluginServer("p-main", "echo")
	attachInMemory(t, g, "p", "main", s)
	cs := caller(t, g)
	ctx := context.Background()

	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__echo"}); err != nil || res.IsError {
		t.Fatalf("allowed call: %v %q", err, text(res))
	}
	refuse.Store(true)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__echo"})
	if err != nil || !res.IsError || text(res) != "refused: plugin p is exempt no more" {
		t.Errorf("refused call: %v %+v", err, res)
	}
	if s.calls.Load() != 1 {
		t.Errorf("the server saw %d calls, want only the allowed one", s.calls.Load())
	}
	mu.Lock()
	if want := []string{"p ok", "p refused"}; !slices.Equal(outcomes, want) {
		t.Errorf("outcomes %q, want %q", outcomes, want)
	}
	mu.Unlock()

	refuse.Store(false)
	g.Detach("p", "main", "crash-looping: exited 5 times within a minute")
	if got := toolNames(t, cs); len(got) != 0 {
		t.Errorf("tools after the server stopped: %q", got)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__echo"})
	if err != nil || !res.IsError || !strings.Contains(text(res), "crash-looping") {
		t.Errorf("call of a stopped server's tool: %v %+v, want its reason", err, res)
	}
	g.Forget("p", "main")
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__echo"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("call after the server was forgotten: %v, want unknown tool", err)
	}
	// Back again: the same tool is served.
	attachInMemory(t, g, "p", "main", s)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__echo"}); err != nil || res.IsError {
		t.Errorf("call after the server came back: %v %q", err, text(res))
	}
}

// Prompts and resources are namespaced by plugin like tools: a prompt is
// <plugin>__<name>, a resource's URI is under oz0-plugin://<plugin>/, and what a
// resource read returns names its URIs the same way.
func TestGatewayNamespacesPromptsAndResources(t *testing.T) {
	g := New(Options{})
	s := newPluginServer("docs", "echo")
	s.srv.AddPrompt(&mcp.Prompt{Name: "greet"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
	})
	s.srv.AddResource(&mcp.Resource{URI: "file:///guide.md", Name: "guide", MIMEType: "text/markdown"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "# guide"}}}, nil
	})
	attachInMemory(t, g, "docs", "main", s)
	cs := caller(t, g)
	ctx := context.Background()

	var prompts []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if !slices.Equal(prompts, []string{"docs__greet"}) {
		t.Errorf("prompts %q, want docs__greet", prompts)
	}
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "docs__greet", Arguments: map[string]string{"who": "operator"}})
	if err != nil || len(pr.Messages) != 1 || pr.Messages[0].Content.(*mcp.TextContent).Text != "hello operator" {
		t.Errorf("get prompt: %v %+v", err, pr)
	}

	uri := ResourceURI("docs", "file:///guide.md")
	if uri != "oz0-plugin://docs/file:///guide.md" {
		t.Errorf("ResourceURI = %q", uri)
	}
	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if !slices.Equal(uris, []string{uri}) {
		t.Errorf("resources %q, want %q", uris, uri)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].URI != uri || rr.Contents[0].Text != "# guide" {
		t.Errorf("read resource: %v %+v", err, rr)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///guide.md"}); err == nil {
		t.Error("the plugin's own URI, outside the namespace, was served")
	}
}
