package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/internal/progresscheck"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/userconf"
)

// The doors a caller reaches the gateway by: the stdio socket `oz0-node mcp`
// relays, and Streamable HTTP.
var doors = []struct {
	name    string
	audit   string // the door its audit lines name
	connect func(n *node, t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession
}{
	{"stdio", "stdio", func(n *node, t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
		return n.stdioClientWith(t, opts)
	}},
	{"http", "http", func(n *node, t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession { return n.clientWith(t, opts) }},
	// The stdio door on a client's pipes handed to the node, as `oz0-node mcp`
	// hands them.
	{"stdio-handoff", "stdio", func(n *node, t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
		p := n.handOff(t, false)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), &mcp.IOTransport{Reader: p.r, Writer: p.w}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}},
}

// seenRequest is what unruly's request tool reports of the call it got.
type seenRequest struct {
	ID     any `json:"id"`
	Params struct {
		Name      string                     `json:"name"`
		Arguments map[string]any             `json:"arguments"`
		Meta      map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// fastRequest calls unruly__request until a call reaches the server on the fast
// path (the HTTP door sends a session's first call, and one a while, through the
// SDK to keep the session alive there) and returns what the server got.
func fastRequest(t *testing.T, cs *mcp.ClientSession, meta mcp.Meta) seenRequest {
	t.Helper()
	for range 3 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__request", Arguments: map[string]any{"a": 1}, Meta: meta})
		if err != nil || res.IsError || len(res.Content) != 1 {
			t.Fatalf("unruly__request: %v %+v", err, res)
		}
		var got seenRequest
		if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &got); err != nil {
			t.Fatal(err)
		}
		if id, ok := got.ID.(string); ok && strings.HasPrefix(id, "oz0f-") {
			return got
		}
	}
	t.Fatal("no call took the fast path")
	return seenRequest{}
}

// Through either door, a call on the fast path reaches the server as the SDK's
// path sends it: the server's own tool name, the caller's arguments, a progress
// token of the node's own and nothing else of the caller's _meta; concurrent calls
// each get their own answer.
func TestFastPathCarriesCallsThroughBothDoors(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			cs := door.connect(n, t, nil)
			got := fastRequest(t, cs, mcp.Meta{"progressToken": "caller-token", "x.test/secret": "not for the server"})
			if got.Params.Name != "request" || len(got.Params.Arguments) != 1 || got.Params.Arguments["a"] != float64(1) {
				t.Errorf("the server got %+v", got.Params)
			}
			var tok string
			json.Unmarshal(got.Params.Meta["progressToken"], &tok)
			if len(got.Params.Meta) != 1 || !strings.HasPrefix(tok, "oz0-") {
				t.Errorf("the server got _meta %s; want only a progress token of the node's", got.Params.Meta)
			}
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					for j := range 25 {
						want := strings.Repeat("x", i) + strings.Repeat("y", j)
						if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": want}); isErr || out != want {
							t.Errorf("echo %q: %q (error %v)", want, out, isErr)
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// The fast path asks the policy before every call, as the SDK's path does: once
// the plugin's installed commit changes under a running server, its next call is
// refused, not answered by the old server.
func TestFastPathAsksThePolicyOnEveryCall(t *testing.T) {
	for i, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			n := start(t, policy.Off, 1, nil, "unruly")
			n.waitState(t, "unruly", "main", api.StateUnsandboxed)
			cs := door.connect(n, t, nil)
			fastRequest(t, cs, nil)
			installFixture(t, n.d, "unruly", 2+i)
			// No reconcile is asked for: only the call's own check sees the change.
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__request", Arguments: map[string]any{}})
			if err != nil {
				t.Fatal(err)
			}
			text := res.Content[0].(*mcp.TextContent).Text
			if !res.IsError || !strings.Contains(text, "refused") || !strings.Contains(text, "changed since it started") {
				t.Errorf("a call after the plugin's commit changed answered %q (error %v); want the refusal", text, res.IsError)
			}
		})
	}
}

// A plugin's PreToolUse hook still sees and can block every call when a caller's
// calls would otherwise take the fast path; a PostToolUse hook alone (the fast
// path's answer decoded for it) sees each result and can block it.
func TestFastPathLeavesNoHookOut(t *testing.T) {
	t.Run("PreToolUse", func(t *testing.T) {
		n := start(t, policy.Off, 1, nil, "hook-spy")
		n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
		cs := n.stdioClientWith(t, nil)
		if out, isErr := call(t, cs, "hook-spy__echo", map[string]any{"text": "spy-block"}); !isErr || !strings.Contains(out, "hook-spy blocked it") {
			t.Errorf("hook-spy's PreToolUse hook did not block its own call: %q (error %v)", out, isErr)
		}
	})
	t.Run("PostToolUse only", func(t *testing.T) {
		n := startRun(t, config.Run{Mode: policy.Off}, 1)
		n.installPostOnlySpy(t)
		cs := n.stdioClientWith(t, nil)
		if out, isErr := call(t, cs, "hook-spy__echo", map[string]any{"text": "spy-block after"}); !isErr || !strings.Contains(out, "blocked by a PostToolUse hook") {
			t.Errorf("the PostToolUse hook did not block the call's result: %q (error %v)", out, isErr)
		}
		if seen := n.seen(t); !strings.Contains(seen, `"hook_event_name":"PostToolUse"`) || !strings.Contains(seen, "spy-block after") {
			t.Errorf("the PostToolUse hook saw:\n%s", seen)
		}
	})
}

// A server's progress reaches the fast call it belongs to under the caller's own
// token, through either door.
func TestFastPathCarriesProgress(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly", "twin-one")
	n.waitState(t, "twin-one", "main", api.StateUnsandboxed)
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			got := make(chan *mcp.ProgressNotificationParams, 4)
			cs := door.connect(n, t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
				got <- r.Params
			}})
			fastRequest(t, cs, nil) // the session's calls now take the fast path
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "twin-one__progress", Arguments: map[string]any{"message": "half", "sleep": 0.2},
				Meta: mcp.Meta{"progressToken": "mine-" + door.name}})
			if err != nil || res.IsError {
				t.Fatalf("twin-one__progress: %v %+v", err, res)
			}
			select {
			case p := <-got:
				if p.ProgressToken != "mine-"+door.name || p.Message != "half" {
					t.Errorf("progress %+v", p)
				}
			case <-time.After(5 * time.Second):
				t.Error("no progress reached the caller")
			}
		})
	}
}

// A result over the bound is answered as a tool error on the fast path too, and
// the server's other calls go on.
func TestFastPathBoundsResults(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	fastRequest(t, cs, nil)
	if out, isErr := call(t, cs, "unruly__big", map[string]any{"mib": 9}); !isErr || !strings.Contains(out, "result too large") {
		t.Errorf("a 9 MiB result: %.200q (error %v)", out, isErr)
	}
	if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": "after"}); isErr || out != "after" {
		t.Errorf("the next call: %q (error %v)", out, isErr)
	}
}

// A caller's cancellation ends its fast call in the node (counted as ended with
// an error), while its session goes on.
func TestFastPathCallerCancels(t *testing.T) {
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			n := start(t, policy.Off, 1, nil, "unruly")
			n.waitState(t, "unruly", "main", api.StateUnsandboxed)
			cs := door.connect(n, t, nil)
			fastRequest(t, cs, nil)
			before := n.metric(t, `oz0_tool_calls_total{outcome="error",plugin="unruly"}`)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "unruly__hang", Arguments: map[string]any{}}); err == nil {
				t.Fatal("a hanging call answered")
			}
			waitFor(t, 10*time.Second, "the cancelled call to end in the node", func() bool {
				return n.metric(t, `oz0_tool_calls_total{outcome="error",plugin="unruly"}`) == before+1
			})
			// (unruly's server itself stays in its hang: it answers one call at a time.)
			if _, err := cs.ListTools(context.Background(), nil); err != nil {
				t.Errorf("the session after a cancel: %v", err)
			}
		})
	}
}

// stdioClientWith is stdioClient with client options.
func (n *node) stdioClientWith(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// sessionRevision is the newest protocol revision with sessions: the HTTP door's
// tests of sessions (their fast path, their end) speak it, since a client of the
// per-request revision opens none.
const sessionRevision = "2025-11-25"

// clientWith is client (a session over Streamable HTTP on the node's socket) with
// client options.
func (n *node) clientWith(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return n.httpClient(t, opts, sessionRevision)
}

// httpClient connects over Streamable HTTP on the node's socket, asking for
// protocol revision rev ("" for the SDK's newest).
func (n *node) httpClient(t *testing.T, opts *mcp.ClientOptions, rev string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", n.d.MCP())
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://node/mcp", HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// metric reads one sample of the node's metrics (0 when absent).
func (n *node) metric(t *testing.T, sample string) float64 {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", n.d.Control())
	}}}
	resp, err := hc.Get("http://node/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// The per-call check answers from its memo only while every input of the
// decision is unchanged: a required value the operator takes away refuses the
// next call, however many calls were allowed before.
func TestCallCheckDecidesAgainWhenConfigChanges(t *testing.T) {
	n := needsConfigNode(t)
	for _, door := range doors {
		cs := door.connect(n, t, nil)
		for range 3 {
			if out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"}); isErr || out != "ok" {
				t.Fatalf("%s: needs-config__echo: %q (error %v)", door.name, out, isErr)
			}
		}
	}
	cs := n.stdioClientWith(t, nil)
	if err := userconf.Save(n.d, "needs-config", userconf.Values{"region": "eu-2"}); err != nil {
		t.Fatal(err)
	}
	pastMemoWindow()
	out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"})
	if !isErr || !strings.Contains(out, "refused") {
		t.Errorf("a call after the required token was taken away: %q (error %v); want a refusal", out, isErr)
	}
}

// installPostOnlySpy installs hook-spy with its PostToolUse hook only (calls then
// take the fast path) and waits for its server.
func (n *node) installPostOnlySpy(t *testing.T) {
	t.Helper()
	commit := commitOf("post-spy", 1)
	dir := n.d.PluginCommit("hook-spy", commit)
	if _, err := fixtures.Extract("hook-spy", dir); err != nil {
		t.Fatal(err)
	}
	hooks := `{"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "${PLUGIN_ROOT}/hooks/record.sh", "timeout": 10}]}]}}`
	if err := os.WriteFile(filepath.Join(dir, "hooks", "hooks.json"), []byte(hooks), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(n.d, installed.Meta{Name: "hook-spy", Commit: commit, Source: "test", InstalledBy: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	n.dm.Reconcile()
	n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
}

// needsConfigNode is a node running needs-config with its required token set,
// the configuration file old enough for the per-call check to take its memo.
func needsConfigNode(t *testing.T) *node {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("not tested: the fixture servers need /usr/bin/python3")
	}
	n := startRun(t, config.Run{Mode: policy.Off}, 1)
	installFixture(t, n.d, "needs-config", 1)
	if err := userconf.Save(n.d, "needs-config", userconf.Values{"api_token": "t0ken"}); err != nil {
		t.Fatal(err)
	}
	// The memo is only taken for a file that has been still for a while (a write
	// within the same tick as the one seen is indistinguishable).
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(userconf.File(n.d, "needs-config"), old, old); err != nil {
		t.Fatal(err)
	}
	n.dm.Reconcile()
	n.waitState(t, "needs-config", "main", api.StateUnsandboxed)
	pastMemoWindow()
	return n
}

// pastMemoWindow waits until a file changed now is old enough for the per-call
// check to answer from its memo: a test of the memo then sees its comparison of
// the file, not its refusal to remember a file that has just changed.
func pastMemoWindow() { time.Sleep(2100 * time.Millisecond) }

// A fast call in flight when the operator restarts its server ends at once with
// the restart as its reason, as a call on the SDK's path does.
func TestFastPathCallEndsWithARestart(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	fastRequest(t, cs, nil)
	done := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__hang", Arguments: map[string]any{}})
		if err != nil {
			done <- err.Error()
			return
		}
		done <- res.Content[0].(*mcp.TextContent).Text
	}()
	time.Sleep(300 * time.Millisecond) // the call reaches the server
	if err := api.NewClient(n.d.Control()).Restart(context.Background(), "unruly", "main"); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		if !strings.Contains(out, "restarted by the operator") {
			t.Errorf("the call in flight answered %q; want the restart named", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight is still waiting 10s after the restart")
	}
}

// A server's progress sent before its answer reaches the caller before that
// answer, and none after it (a caller ends a call's progress at its answer, as
// MCP has it), on the fast path and on the SDK's.
func TestProgressReachesTheCallerBeforeItsAnswer(t *testing.T) {
	t.Run("fast path", func(t *testing.T) {
		n := start(t, policy.Off, 1, nil, "twin-one")
		n.waitState(t, "twin-one", "main", api.StateUnsandboxed)
		rc := n.rawStdio(t)
		progresscheck.InOrder(t, rc.send, rc.line, "twin-one__progress", 40)
	})
	// hook-spy's PreToolUse hook for every tool sends twin-one's calls through
	// the SDK.
	t.Run("the SDK's path", func(t *testing.T) {
		n := start(t, policy.Off, 1, nil, "twin-one", "hook-spy")
		n.waitState(t, "twin-one", "main", api.StateUnsandboxed)
		n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
		rc := n.rawStdio(t)
		progresscheck.InOrder(t, rc.send, rc.line, "twin-one__progress", 20)
	})
}

// Over the HTTP door a fast call whose caller asked for progress is answered as
// an event stream carrying its progress, then its answer; without a token it is
// answered as JSON.
func TestHTTPDoorAnswersProgressOnTheCallsOwnStream(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "unruly", "twin-one")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	n.waitState(t, "twin-one", "main", api.StateUnsandboxed)
	rh := n.rawHTTPSession(t)
	rh.warm()
	// The server's state can be read a moment before its tools are served: a
	// call answered proves they are (and the ones after it take the fast path).
	waitFor(t, 10*time.Second, "twin-one's tools served", func() bool {
		st, b, _ := rh.post(toolCall("ready", "twin-one__progress", map[string]any{"message": "ready"}), nil)
		return st == http.StatusOK && bytes.Contains(b, []byte("own token")) && !bytes.Contains(b, []byte(`"isError":true`))
	})
	for i := range 10 {
		id := strconv.Itoa(i + 1)
		st, b, h := rh.post(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"twin-one__progress","arguments":{"message":"m`+id+`"},"_meta":{"progressToken":"t`+id+`"}}}`, nil)
		if st != http.StatusOK || h.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("call %s: %d %q %s", id, st, h.Get("Content-Type"), b)
		}
		var datas []string
		for line := range strings.Lines(string(b)) {
			if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
				datas = append(datas, d)
			}
		}
		if len(datas) != 2 || !strings.Contains(datas[0], `"method":"notifications/progress"`) || !strings.Contains(datas[0], `"progressToken":"t`+id+`"`) ||
			!strings.Contains(datas[0], `"message":"m`+id+`"`) || !strings.HasPrefix(datas[1], `{"jsonrpc":"2.0","id":`+id+`,"result":`) {
			t.Fatalf("call %s: want its progress, then its answer:\n%s", id, b)
		}
	}
	st, b, h := rh.post(toolCall("plain", "twin-one__progress", map[string]any{"message": "none asked"}), nil)
	if st != http.StatusOK || h.Get("Content-Type") != "application/json" || bytes.Contains(b, []byte("notifications/progress")) {
		t.Errorf("a call without a token: %d %q %s", st, h.Get("Content-Type"), b)
	}
}
