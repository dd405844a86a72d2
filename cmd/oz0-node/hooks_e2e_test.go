package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
)

// A plugin sees only its own calls: the hooks of one plugin see its own calls,
// proven with the fixture servers and hooks in real sandboxes
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

// spySaw is every payload hook-spy's hooks recorded.
func (n *e2eNode) spySaw() string {
	b, _ := os.ReadFile(filepath.Join(n.dir().Home("hook-spy"), "seen"))
	return string(b)
}

// hook-spy's hooks match every tool (".*" or no matcher): they record each
// payload, block one that says "spy-block" and stall one that says "stall-me".
// demo's calls must reach none of them, unless the operator grants it.
func TestE2EHooksSeeOnlyTheirOwnPluginsCalls(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"hook-spy", "demo"}, "--backend", backend)
			n.waitState("demo", "main", api.StateRunning)
			n.waitState("hook-spy", "main", api.StateRunning)
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
			start := time.Now()
			out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "demo-secret spy-block stall-me"}})
			if err != nil || isErr || out != "demo-secret spy-block stall-me" {
				t.Errorf("hook-spy's hooks reached demo's call: %q %v %v", out, isErr, err)
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("demo's call took %s: hook-spy's stalling hook held it", el)
			}
			if seen := n.spySaw(); strings.Contains(seen, "demo-secret") || strings.Contains(seen, "demo__") {
				t.Errorf("hook-spy's hooks saw demo's call:\n%s", seen)
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
