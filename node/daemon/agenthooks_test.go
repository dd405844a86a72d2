package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/mcpdoor"
	"oz0.ai/node/node/policy"
)

// ccMeta is the _meta Claude Code 2.1.x puts in every request (protocol revision
// 2026-07-28, sessionless), as it sent it to the node: its capabilities, without
// the node's mark.
const ccMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","title":"Claude Code","version":"2.1.328"},"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"elicitation":{"form":{},"url":{}}}`

// ccMarkedMeta is ccMeta with the agent-hooks capability declared.
const ccMarkedMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"claude-code","version":"2.1.328"},"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true},"experimental":{"` + gateway.AgentHooksCapability + `":{}}}`

// stdioLines is a connection to the node's stdio endpoint spoken line by line, as
// `oz0-node mcp` relays a client's bytes.
type stdioLines struct {
	t  *testing.T
	c  lineRW
	sc *bufio.Scanner
	// early holds responses read while waiting for another: answers to requests
	// sent back to back may come in any order.
	early map[string]stdioAnswer
}

type stdioAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// lineRW is what stdioLines speaks on: the endpoint's socket, or a client's
// pipes handed to the node.
type lineRW interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
}

// handedLines is stdioLines on pipes handed to the node, as `oz0-node mcp`
// hands them (with agentHooks, as --agent-hooks does).
func (n *node) handedLines(t *testing.T, agentHooks bool) *stdioLines {
	t.Helper()
	p := n.handOff(t, agentHooks)
	r := &stdioLines{t: t, c: p, sc: bufio.NewScanner(p)}
	r.sc.Buffer(nil, 16<<20)
	return r
}

func (n *node) stdioLines(t *testing.T, preamble bool) *stdioLines {
	t.Helper()
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &stdioLines{t: t, c: c, sc: bufio.NewScanner(c)}
	r.sc.Buffer(nil, 16<<20)
	if preamble {
		r.send(mcpdoor.AgentHooksPreamble)
	}
	return r
}

func (r *stdioLines) send(line string) {
	r.t.Helper()
	if _, err := r.c.Write([]byte(line + "\n")); err != nil {
		r.t.Fatal(err)
	}
}

// answer reads lines until the response to id, skipping notifications.
func (r *stdioLines) answer(id string) json.RawMessage {
	r.t.Helper()
	done := func(a stdioAnswer) json.RawMessage {
		if a.Error != nil {
			r.t.Fatalf("request %s: error %s", id, a.Error)
		}
		return a.Result
	}
	if a, ok := r.early[id]; ok {
		delete(r.early, id)
		return done(a)
	}
	r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for r.sc.Scan() {
		var m struct {
			ID json.RawMessage `json:"id"`
			stdioAnswer
		}
		if json.Unmarshal(r.sc.Bytes(), &m) != nil || m.ID == nil || m.Result == nil && m.Error == nil {
			continue // a notification or a request of the node's
		}
		if string(m.ID) != id {
			if r.early == nil {
				r.early = map[string]stdioAnswer{}
			}
			r.early[string(m.ID)] = m.stdioAnswer
			continue
		}
		return done(m.stdioAnswer)
	}
	r.t.Fatalf("no answer to request %s: %v", id, r.sc.Err())
	return nil
}

// call makes a tools/call of unruly__request and returns the id the server got
// it under: "oz0f-…" when it took the gateway's fast path.
func (r *stdioLines) call(id int, text, meta string) string {
	r.t.Helper()
	r.send(fmt.Sprintf(`{"method":"tools/call","params":{"name":"unruly__request","arguments":{"text":%q},"_meta":{%s}},"jsonrpc":"2.0","id":%d}`, text, meta, id))
	return serverID(r.t, r.answer(fmt.Sprint(id)))
}

// serverID reads the request id unruly's request tool reports from its result.
func serverID(t *testing.T, result json.RawMessage) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	if err := json.Unmarshal(result, &res); err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("unruly__request answered %s", result)
	}
	var got seenRequest
	if err := json.Unmarshal([]byte(res.Content[0].Text), &got); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(got.ID)
}

func fastID(id string) bool { return strings.HasPrefix(id, "oz0f-") }

// hookRuns counts hook-spy's recorded payloads per event that mention text.
func hookRuns(seen, text string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(seen, "\n") {
		if !strings.Contains(line, text) {
			continue
		}
		var p struct {
			Event string `json:"hook_event_name"`
		}
		json.Unmarshal([]byte(line), &p)
		out[p.Event]++
	}
	return out
}

// A client that forwards its own hook events (Claude Code through `oz0-node
// setup`) gets no hooks fired by the gateway around any of its calls, whichever
// door, protocol revision and call path it takes; a client that does not gets
// each hook exactly once per event. Claude Code 2.1.x speaks the sessionless
// revision and sends server/discover twice on one connection: a mark carried by
// one message (the SDK keeps each discover's capabilities as the session's) was
// lost at the second, and every hook of its calls ran twice.
func TestForwardingClientsGetNoGatewayHooks(t *testing.T) {
	// hook-spy's hooks (PreToolUse and PostToolUse, every tool) see unruly's calls.
	n := startRun(t, config.Run{Mode: policy.Off, HookGrants: []policy.HookGrant{{Watcher: "hook-spy", Other: "unruly"}}}, 1, "hook-spy", "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
	marked := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Experimental: map[string]any{gateway.AgentHooksCapability: map[string]any{}}}}

	// Each case makes its calls with text as their argument and says whether the
	// client forwards its hooks; paths are the paths its calls took.
	cases := []struct {
		name     string
		forwards bool
		calls    func(t *testing.T, text string) (paths []string)
	}{
		{"stdio bridge, Claude Code's messages", true, func(t *testing.T, text string) []string {
			r := n.stdioLines(t, true)
			r.send(`{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` + ccMeta + `}}}`)
			r.send(`{"jsonrpc":"2.0","id":"listen:0","method":"subscriptions/listen","params":{"_meta":{` + ccMeta + `},"notifications":{"toolsListChanged":true}}}`)
			r.send(`{"method":"server/discover","jsonrpc":"2.0","id":0,"params":{"_meta":{` + ccMeta + `}}}`)
			r.answer(`"server-discover-probe-1"`)
			r.answer("0")
			r.send(`{"method":"tools/list","jsonrpc":"2.0","id":3,"params":{"_meta":{` + ccMeta + `}}}`)
			r.answer("3")
			return []string{r.call(4, text, ccMeta+`,"claudecode/toolUseId":"toolu_1","progressToken":4`), r.call(5, text, ccMeta)}
		}},
		{"stdio bridge handing off its pipes, Claude Code's messages", true, func(t *testing.T, text string) []string {
			r := n.handedLines(t, true)
			r.send(`{"jsonrpc":"2.0","id":"server-discover-probe-1","method":"server/discover","params":{"_meta":{` + ccMeta + `}}}`)
			r.send(`{"method":"server/discover","jsonrpc":"2.0","id":0,"params":{"_meta":{` + ccMeta + `}}}`)
			r.answer(`"server-discover-probe-1"`)
			r.answer("0")
			return []string{r.call(4, text, ccMeta+`,"claudecode/toolUseId":"toolu_1","progressToken":4`), r.call(5, text, ccMeta)}
		}},
		{"stdio bridge handing off its pipes, a call first", true, func(t *testing.T, text string) []string {
			r := n.handedLines(t, true)
			return []string{r.call(1, text, ccMeta), r.call(2, text, ccMeta)}
		}},
		{"stdio bridge handing off its pipes, no --agent-hooks", false, func(t *testing.T, text string) []string {
			r := n.handedLines(t, false)
			r.send(`{"method":"server/discover","jsonrpc":"2.0","id":0,"params":{"_meta":{` + ccMeta + `}}}`)
			r.answer("0")
			return []string{r.call(1, text, ccMeta)}
		}},
		{"stdio bridge, a call first", true, func(t *testing.T, text string) []string {
			// The session's first message is the call: it takes the SDK's path.
			r := n.stdioLines(t, true)
			return []string{r.call(1, text, ccMeta), r.call(2, text, ccMeta)}
		}},
		{"stdio bridge, initialize", true, func(t *testing.T, text string) []string {
			r := n.stdioLines(t, true)
			r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
			r.answer("1")
			r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			return []string{r.call(2, text, `"progressToken":true`), r.call(3, text, `"progressToken":"p"`)}
		}},
		{"stdio, every request declares it", true, func(t *testing.T, text string) []string {
			r := n.stdioLines(t, false)
			r.send(`{"method":"server/discover","jsonrpc":"2.0","id":0,"params":{"_meta":{` + ccMarkedMeta + `}}}`)
			r.answer("0")
			return []string{r.call(1, text, ccMarkedMeta), r.call(2, text, ccMarkedMeta)}
		}},
		{"http session, initialize declares it", true, func(t *testing.T, text string) []string {
			cs := n.httpClient(t, marked, sessionRevision)
			return []string{sdkCall(t, cs, text), fastRequestWith(t, cs, text)}
		}},
		{"http sessionless, every request declares it", true, func(t *testing.T, text string) []string {
			cs := n.httpClient(t, marked, "")
			if v := cs.InitializeResult().ProtocolVersion; v != gateway.PerRequestProtocol {
				t.Fatalf("the HTTP door negotiated %s with a client of %s", v, gateway.PerRequestProtocol)
			}
			return []string{sdkCall(t, cs, text), sdkCall(t, cs, text)}
		}},
		{"stdio, Claude Code's messages without the bridge", false, func(t *testing.T, text string) []string {
			r := n.stdioLines(t, false)
			r.send(`{"method":"server/discover","jsonrpc":"2.0","id":0,"params":{"_meta":{` + ccMeta + `}}}`)
			r.answer("0")
			return []string{r.call(1, text, ccMeta)}
		}},
		{"http session", false, func(t *testing.T, text string) []string {
			return []string{sdkCall(t, n.httpClient(t, nil, sessionRevision), text)}
		}},
		{"http sessionless", false, func(t *testing.T, text string) []string {
			return []string{sdkCall(t, n.httpClient(t, nil, ""), text)}
		}},
	}
	var sawFast, sawSDK bool
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := fmt.Sprintf("case-%d-marker", i)
			paths := c.calls(t, text)
			runs := hookRuns(n.seen(t), text)
			t.Logf("calls took %v; hook runs %v", paths, runs)
			if c.forwards {
				for _, p := range paths {
					sawFast, sawSDK = sawFast || fastID(p), sawSDK || !fastID(p)
				}
				if len(runs) != 0 {
					t.Errorf("the gateway fired hooks for a client that forwards its own (calls took %v): %v", paths, runs)
				}
				return
			}
			if runs["PreToolUse"] != len(paths) || runs["PostToolUse"] != len(paths) {
				t.Errorf("hook runs for %d calls: %v; want each event once a call", len(paths), runs)
			}
		})
	}
	if !sawFast || !sawSDK {
		t.Errorf("the forwarding clients' calls took the fast path: %v, the SDK's: %v; want both tested", sawFast, sawSDK)
	}
}

// sdkCall calls unruly__request through a client session and returns the id the
// server got the call under.
func sdkCall(t *testing.T, cs *mcp.ClientSession, text string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__request", Arguments: map[string]any{"text": text}})
	if err != nil {
		t.Fatalf("unruly__request: %v", err)
	}
	b, _ := json.Marshal(res)
	return serverID(t, b)
}

// fastRequestWith is sdkCall until a call takes the fast path (the HTTP door
// sends a session's first call, and one a while, through the SDK).
func fastRequestWith(t *testing.T, cs *mcp.ClientSession, text string) string {
	t.Helper()
	for range 3 {
		if id := sdkCall(t, cs, text); fastID(id) {
			return id
		}
	}
	t.Fatal("no call took the fast path")
	return ""
}
