package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/internal/progresscheck"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/policy"
)

// A plugin sees only its own calls: hooks, resources, prompts and progress of one
// plugin stay with it, proven with the fixture servers and hooks in real sandboxes
// through the running node's gateway.

func (n *e2eNode) dir() datadir.Dir {
	d, _ := datadir.New(n.data)
	return d
}

// mcpClient connects to the node's MCP socket as a caller would.
func (n *e2eNode) mcpClient(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	sock := n.dir().MCP()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://node/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(ctx context.Context, cs *mcp.ClientSession, p *mcp.CallToolParams) (string, bool, error) {
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return "", false, err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError, nil
}

// spySaw is every payload hook-spy's hooks recorded: of its own tools' calls in
// its home, of the rest (granted calls of other plugins', the agent's) in the
// home of its hook runs that receive the agent's data.
func (n *e2eNode) spySaw() string {
	b, _ := os.ReadFile(filepath.Join(n.dir().Home("hook-spy"), "seen"))
	c, _ := os.ReadFile(filepath.Join(n.dir().HookHome("hook-spy"), "seen"))
	return string(b) + string(c)
}

// hook-spy's hooks match every tool (".*" or no matcher): they record each
// payload, block one that says "spy-block" and stall one that says "stall-me".
// demo's calls must reach none of them, unless the operator grants it.
func TestE2EHooksSeeOnlyTheirOwnPluginsCalls(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"hook-spy", "demo", "claude-hooks"}, "--backend", backend)
			n.waitState("demo", "main", api.StateRunning)
			n.waitState("hook-spy", "main", api.StateRunning)
			n.waitState("claude-hooks", "notes", api.StateRunning)
			cs := n.mcpClient(t, nil)
			ctx := context.Background()

			// Its own calls: seen before and after, and blockable.
			if out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "own-call"}}); err != nil || isErr || out != "own-call" {
				t.Fatalf("hook-spy__echo: %q %v %v", out, isErr, err)
			}
			if out, isErr, _ := callText(ctx, cs, &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "spy-block"}}); !isErr || !strings.Contains(out, "hook-spy blocked it") {
				t.Errorf("hook-spy's hook did not block its own call: %q", out)
			}
			seen := n.spySaw()
			if !strings.Contains(seen, `"tool_name":"hook-spy__echo"`) || !strings.Contains(seen, `"hook_event_name":"PostToolUse"`) {
				t.Fatalf("hook-spy's hooks did not see its own call in the sandbox:\n%s", seen)
			}

			// Another plugin's call: not seen, not blocked, not stalled.
			out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "demo-secret spy-block stall-me"}})
			if err != nil || isErr || out != "demo-secret spy-block stall-me" {
				t.Errorf("hook-spy's hooks reached demo's call: %q %v %v", out, isErr, err)
			}
			// Nor held: hook-spy's stalling hook does not run for demo's calls.
			start := time.Now()
			if out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "demo-hold stall-me"}}); err != nil || isErr || out != "demo-hold stall-me" {
				t.Errorf("demo's call: %q %v %v", out, isErr, err)
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("demo's call took %s: hook-spy's stalling hook held it", el)
			}
			if seen := n.spySaw(); strings.Contains(seen, "demo-secret") || strings.Contains(seen, "demo__") {
				t.Errorf("hook-spy's hooks saw demo's call:\n%s", seen)
			}
			// Two plugins with hooks: each one's hooks stay off the other's calls.
			if out, isErr, _ := callText(ctx, cs, &mcp.CallToolParams{Name: "claude-hooks__echo", Arguments: map[string]any{"text": "claude-secret forbidden"}}); !isErr || !strings.Contains(out, "not allowed") {
				t.Errorf("claude-hooks' guard did not block its own call: %q", out)
			}
			if out, isErr, _ := callText(ctx, cs, &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "forbidden"}}); isErr || out != "forbidden" {
				t.Errorf("claude-hooks' guard (matcher echo) reached hook-spy's call: %q", out)
			}
			if seen := n.spySaw(); strings.Contains(seen, "claude-secret") {
				t.Errorf("hook-spy's hooks saw claude-hooks' call:\n%s", seen)
			}
			if st := n.status(); len(st.HookGrants) != 0 {
				t.Errorf("grants without a flag: %+v", st.HookGrants)
			}

			// With the operator's grant, by name: seen and blockable.
			n.stop()
			n.start("--backend", backend, "--plugin-hooks-see", "hook-spy=demo")
			n.waitState("demo", "main", api.StateRunning)
			n.waitState("hook-spy", "main", api.StateRunning)
			cs = n.mcpClient(t, nil)
			out, isErr, err = callText(ctx, cs, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "granted-secret spy-block"}})
			if err != nil || !isErr || !strings.Contains(out, "hook-spy blocked it") {
				t.Errorf("granted: demo's call answered %q %v %v; want hook-spy's block", out, isErr, err)
			}
			if seen := n.spySaw(); !strings.Contains(seen, "granted-secret") {
				t.Errorf("granted: hook-spy's hooks did not see demo's call:\n%s", seen)
			}
			st := n.status()
			if len(st.HookGrants) != 1 || st.HookGrants[0].Flag != "hook-spy=demo" || st.HookGrants[0].Matches != "both" {
				t.Errorf("status grants %+v", st.HookGrants)
			}
			for _, p := range st.Plugins {
				if p.Name == "hook-spy" && !slices.Equal(p.HooksSee, []string{"demo"}) {
					t.Errorf("hook-spy hooks_see %v", p.HooksSee)
				}
			}
			if fout, _ := n.oz("findings"); !strings.Contains(fout, api.CodeHookGrant) || !strings.Contains(fout, "hook-spy=demo") {
				t.Errorf("findings lack the grant:\n%s", fout)
			}
			if sout, _ := n.oz("status"); !strings.Contains(sout, "--plugin-hooks-see hook-spy=demo") {
				t.Errorf("status lacks the grant:\n%s", sout)
			}
		})
	}
}

// hook-spy's stall hook asks for an hour and sleeps for one; the node cuts it at
// its cap and the call goes on, and no sleeping hook stays behind.
func TestE2EHookTimeoutIsCappedByTheNode(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"hook-spy"}, "--backend", backends[0])
	n.waitState("hook-spy", "main", api.StateRunning)
	var capped bool
	for _, p := range n.status().Plugins {
		for _, h := range p.Hooks {
			capped = capped || (h.Capped && h.Timeout == policy.HookTimeoutCap.Seconds())
		}
	}
	if !capped {
		t.Errorf("status does not show the capped hook: %+v", n.status().Plugins)
	}
	if fout, _ := n.oz("findings"); !strings.Contains(fout, api.CodeHookTimeoutCapped) {
		t.Errorf("findings lack %s:\n%s", api.CodeHookTimeoutCapped, fout)
	}
	cs := n.mcpClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), policy.HookTimeoutCap+30*time.Second)
	defer cancel()
	start := time.Now()
	out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "stall-me"}})
	el := time.Since(start)
	if err != nil || isErr || out != "stall-me" {
		t.Fatalf("stalled call after %s: %q %v %v", el, out, isErr, err)
	}
	if el < policy.HookTimeoutCap-time.Second || el > policy.HookTimeoutCap+20*time.Second {
		t.Errorf("the call took %s; want the hook cut at the cap, %s", el, policy.HookTimeoutCap)
	}
	if ps := processesMentioning("sleep 3600"); len(ps) > 0 {
		t.Errorf("the stalled hook still runs: %v", ps)
	}
	if !strings.Contains(n.log.String(), "hook stopped at the node's cap") {
		t.Errorf("the node did not log the capped hook")
	}
}

// twin-one and twin-two offer the same resource URI and prompt name; each has a
// tool that sends progress with its own token or, like a hostile server, with a
// token it was handed.
func TestE2EResourcesPromptsAndProgressStayWithTheirPlugin(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"twin-one", "twin-two"}, "--backend", backends[0])
	n.waitState("twin-one", "main", api.StateRunning)
	n.waitState("twin-two", "main", api.StateRunning)

	type prog struct {
		token any
		msg   string
	}
	var mu sync.Mutex
	var got []prog
	cs := n.mcpClient(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, prog{r.Params.ProgressToken, r.Params.Message})
		mu.Unlock()
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Resources: both readable, each its own plugin's, under URIs that name it.
	texts := map[string]string{}
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(r.URI, "shared/notes.txt") {
			continue
		}
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.URI})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].URI != r.URI {
			t.Errorf("read %s: %v %+v", r.URI, err, res)
			continue
		}
		texts[r.URI] = res.Contents[0].Text
	}
	for _, p := range []string{"twin-one", "twin-two"} {
		uri := gateway.ResourceURI(p, "file:///shared/notes.txt")
		if got := texts[uri]; got != "resource file:///shared/notes.txt of plugin "+p {
			t.Errorf("resource %s reads %q; all read: %q", uri, got, texts)
		}
	}
	if len(texts) != 2 {
		t.Errorf("want the two plugins' resources, each readable: %q", texts)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///shared/notes.txt"}); err == nil {
		t.Error("the bare URI, which two plugins offer, was read from one of them")
	}
	// Prompts: <plugin>__<prompt>, each its own.
	for _, p := range []string{"twin-one", "twin-two"} {
		res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: p + "__greet"})
		if err != nil || len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != "prompt greet of plugin "+p {
			t.Errorf("prompt %s__greet: %v %+v", p, err, res)
		}
	}

	// Progress: twin-one's call runs for a while under the caller's token
	// "victim"; twin-two aims progress at it with that token and with the token
	// twin-one was given.
	tokenFile := filepath.Join(n.dir().Home("twin-one"), "progress-token")
	os.Remove(tokenFile)
	oneDone := make(chan string, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "twin-one__progress", Arguments: map[string]any{"message": "from twin-one", "sleep": 4}}
		p.SetProgressToken("victim")
		out, _, err := callText(ctx, cs, p)
		if err != nil {
			out = err.Error()
		}
		oneDone <- out
	}()
	var given string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(tokenFile); err == nil && len(b) > 0 {
			json.Unmarshal(b, &given)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if given == "" {
		t.Fatal("twin-one never reported the progress token it was given")
	}
	if given == "victim" {
		t.Errorf("twin-one was given the caller's token %q; want one of the node's own", given)
	}
	for _, tok := range []string{"victim", given} {
		out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "twin-two__progress", Arguments: map[string]any{"token": tok, "message": "injected by twin-two"}})
		if err != nil || isErr {
			t.Fatalf("twin-two__progress: %q %v %v", out, isErr, err)
		}
	}
	// twin-two's own progress still reaches its own caller, under the caller's token.
	mine := &mcp.CallToolParams{Name: "twin-two__progress", Arguments: map[string]any{"message": "twin-two's own"}}
	mine.SetProgressToken("mine")
	if out, isErr, err := callText(ctx, cs, mine); err != nil || isErr || strings.Contains(out, "mine") {
		t.Errorf("twin-two__progress with its own token: %q %v %v (the server must not see the caller's token)", out, isErr, err)
	}
	if out := <-oneDone; !strings.Contains(out, given) {
		t.Errorf("twin-one's call answered %q", out)
	}
	// A call's progress travels on the session's GET stream and its answer in
	// the POST's response, so progress sent before an answer may be read after
	// it: wait for it while the node's route for it lingers (2 s), no longer.
	want := []prog{{"victim", "from twin-one"}, {"mine", "twin-two's own"}}
	arrived := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	}
	for wait := time.Now().Add(5 * time.Second); !arrived() && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("progress %+v did not reach its caller; got %+v", w, got)
		}
	}
	for _, p := range got {
		if strings.Contains(p.msg, "injected") {
			t.Errorf("twin-two's progress reached twin-one's call: %+v (all: %+v)", p, got)
		}
	}

	// And it comes before its call's answer, never after: raw lines of the
	// stdio door from twin-two in its sandbox.
	c, err := net.Dial("unix", n.dir().MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(line string) {
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	next := func(limit time.Duration) []byte {
		c.SetReadDeadline(time.Now().Add(limit))
		b, err := r.ReadBytes('\n')
		if err != nil {
			return nil
		}
		return b
	}
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if next(10*time.Second) == nil {
		t.Fatal("the stdio door did not answer initialize")
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	progresscheck.InOrder(t, send, next, "twin-two__progress", 40)
}

func TestPluginLintWarnsOfACappedHookTimeout(t *testing.T) {
	dir, err := fixtures.Extract("hook-spy", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runServiceCLI(t, "plugin", "lint", dir)
	if err != nil || !strings.Contains(out, "timeout: 3600 seconds (timeout is in seconds, as Claude Code reads it); the node caps hook timeouts at 60 seconds") {
		t.Errorf("lint (%v):\n%s", err, out)
	}
	if _, ferr := fixtures.Extract("demo", filepath.Join(dir, "..", "demo")); ferr != nil {
		t.Fatal(ferr)
	}
	out, _, err = runServiceCLI(t, "plugin", "lint", filepath.Join(dir, "..", "demo"))
	if err != nil || strings.Contains(out, "timeout") {
		t.Errorf("lint of a plugin without long hooks (%v):\n%s", err, out)
	}
}
