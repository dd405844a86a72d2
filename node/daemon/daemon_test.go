package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/supervise"
)

// These tests run the real daemon with the fixture Python MCP servers, unsandboxed
// (the Direct runner): they prove the supervisor, gateway, hooks, refusals and the
// control API. The same paths under bwrap and gVisor are proven by the integration
// tests in cmd/oz0-node.

func commitOf(name string, n int) string { return fmt.Sprintf("%040x", len(name)*1000+n) }

func installFixture(t *testing.T, d datadir.Dir, name string, n int) string {
	t.Helper()
	commit := commitOf(name, n)
	if _, err := fixtures.Extract(name, d.PluginCommit(name, commit)); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "fixtures/" + name, InstalledBy: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return commit
}

type node struct {
	d      datadir.Dir
	dm     *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, mode policy.Mode, tier int, exempt []string, plugins ...string) *node {
	t.Helper()
	ex, err := policy.ParseExemptions(exempt)
	if err != nil {
		t.Fatal(err)
	}
	return startRun(t, config.Run{Mode: mode, Exemptions: ex}, tier, plugins...)
}

// startRun starts a node with a whole run configuration.
func startRun(t *testing.T, run config.Run, tier int, plugins ...string) *node {
	t.Helper()
	return startConfig(t, run, tier, nil, plugins...)
}

// startConfig is startRun with the daemon's configuration changed by mod (which
// may prepare the data folder: it runs after the plugins are installed).
func startConfig(t *testing.T, run config.Run, tier int, mod func(datadir.Dir, *daemon.Config), plugins ...string) *node {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("not tested: the fixture servers need /usr/bin/python3")
	}
	dir := t.TempDir()
	d, _ := datadir.New(dir + "/data")
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range plugins {
		installFixture(t, d, p, 1)
	}
	v := probe.Assume("linux", policy.BackendBwrap, false)
	if tier == 0 {
		v = probe.Verdict{OS: "linux", Backend: policy.BackendNone}
	}
	n := plan.New(d, run, v, nil)
	n.Root = false // per-plugin users are proven with real backends elsewhere
	cfg := daemon.Config{Node: n, Version: "test",
		Supervise: supervise.Options{MinBackoff: 30 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CrashLoop: 3, CrashWindow: 30 * time.Second}}
	if mod != nil {
		mod(d, &cfg)
	}
	dm := daemon.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	nd := &node{d: d, dm: dm, cancel: cancel, done: make(chan error, 1)}
	go func() { nd.done <- dm.Run(ctx) }()
	t.Cleanup(nd.stop)
	waitFor(t, 10*time.Second, "control socket", func() bool {
		_, err := api.NewClient(d.Control()).Status(context.Background())
		return err == nil
	})
	return nd
}

func (n *node) stop() {
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", limit, what)
}

func (n *node) status(t *testing.T) *api.Status {
	t.Helper()
	st, err := api.NewClient(n.d.Control()).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (n *node) server(t *testing.T, plugin, server string) api.Server {
	t.Helper()
	for _, p := range n.status(t).Plugins {
		if p.Name == plugin {
			for _, s := range p.Servers {
				if s.Name == server {
					return s
				}
			}
		}
	}
	return api.Server{State: "absent"}
}

func (n *node) waitState(t *testing.T, plugin, server string, states ...string) api.Server {
	t.Helper()
	var s api.Server
	waitFor(t, 15*time.Second, plugin+"/"+server+" in "+strings.Join(states, "|"), func() bool {
		s = n.server(t, plugin, server)
		for _, st := range states {
			if s.State == st {
				return true
			}
		}
		return false
	})
	return s
}

func (n *node) client(t *testing.T) *mcp.ClientSession {
	t.Helper()
	return n.clientWith(t, nil)
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestGatewayListsAndCallsNamespacedTools(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo", "claude-hooks")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	n.waitState(t, "claude-hooks", "notes", api.StateUnsandboxed)
	cs := n.client(t)
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"demo__echo", "demo__add", "claude-hooks__echo"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	if out, isErr := call(t, cs, "demo__add", map[string]any{"a": 2, "b": 40}); isErr || out != "42" {
		t.Errorf("demo__add = %q (error %v), want 42", out, isErr)
	}
}

func TestToolEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("OZ0_TEST_CANARY", "leak")
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	out, isErr := call(t, n.client(t), "demo__whoami", nil)
	if isErr {
		t.Fatal(out)
	}
	var who struct {
		Env []string `json:"env"`
	}
	if err := json.Unmarshal([]byte(out), &who); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "OZ0_TEST_CANARY") {
		t.Fatalf("the node's environment reached the tool: %v", who.Env)
	}
	for _, k := range who.Env {
		switch k {
		case "PATH", "LANG", "HOME", "TMPDIR", "PLUGIN_ROOT", "PLUGIN_DATA", "CLAUDE_PLUGIN_ROOT", "CLAUDE_PLUGIN_DATA", "OZ0_PLUGIN", "LC_CTYPE", "PWD":
		default:
			t.Errorf("unexpected variable %s in the tool's environment", k)
		}
	}
}

func TestHostHealthRefusedEverywhere(t *testing.T) {
	n := start(t, policy.Strict, 1, nil, "host-health")
	s := n.waitState(t, "host-health", "health", api.StateRefused)
	if !strings.Contains(strings.Join(s.Reasons, " "), "sandbox: host") || !strings.Contains(strings.Join(s.Reasons, " "), "--plugin-sandbox-exempt host-health") {
		t.Errorf("status reasons do not say why or how: %v", s.Reasons)
	}
	found := false
	for _, f := range n.status(t).Findings {
		if f.Code == api.CodeServerRefused && strings.HasPrefix(f.Subject, "host-health/") {
			found = true
		}
	}
	if !found {
		t.Error("no server-refused finding for host-health")
	}
	out, isErr := call(t, n.client(t), "host-health__health", nil)
	if !isErr || !strings.Contains(out, "sandbox: host") {
		t.Errorf("a call of the refused tool answered %q (error %v); want the refusal", out, isErr)
	}
}

func TestHostHealthExemptRunsAsNodeUser(t *testing.T) {
	n := start(t, policy.Strict, 1, []string{"host-health"}, "host-health")
	s := n.waitState(t, "host-health", "health", api.StateExemptRun)
	if s.Sandbox != policy.BackendNone || s.User != "node user" {
		t.Errorf("exempt server: sandbox %s user %s; want none / node user", s.Sandbox, s.User)
	}
	out, isErr := call(t, n.client(t), "host-health__whoami", nil)
	if isErr || !strings.Contains(out, fmt.Sprintf(`"uid": %d`, os.Getuid())) {
		t.Errorf("whoami = %q; want the node's uid %d", out, os.Getuid())
	}
	if st := n.status(t); st.Node.Labels["oz0.ai/exempt/host-health"] == "" {
		t.Errorf("no derived exempt label: %v", st.Node.Labels)
	}
}

func TestExemptionForOtherCommitStaysRefused(t *testing.T) {
	n := start(t, policy.Strict, 1, []string{"host-health@" + strings.Repeat("ab", 20)}, "host-health")
	n.waitState(t, "host-health", "health", api.StateRefused)
	st := n.status(t)
	var mismatch bool
	for _, f := range st.Findings {
		if f.Code == api.CodeExemptionCommit {
			mismatch = true
		}
	}
	if !mismatch || len(st.Exempt) != 1 || st.Exempt[0].Matches != "commit-mismatch" {
		t.Errorf("want an exemption-commit-mismatch finding and exemption state; got %+v / %+v", st.Findings, st.Exempt)
	}
}

func TestCrashLoopRaisesFindingWithStderr(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "crashy")
	waitFor(t, 20*time.Second, "crash-loop finding", func() bool {
		for _, f := range n.status(t).Findings {
			if f.Code == api.CodeCrashLoop && f.Subject == "crashy/flaky" && strings.Contains(f.Message, "failing at start on purpose") {
				return true
			}
		}
		return false
	})
	if s := n.server(t, "crashy", "flaky"); s.Restarts < 3 {
		t.Errorf("restarts = %d, want ≥ 3", s.Restarts)
	}
	lines, err := api.NewClient(n.d.Control()).Logs(context.Background(), "crashy", "flaky", 10)
	if err != nil || !strings.Contains(strings.Join(lines, "\n"), "failing at start") {
		t.Errorf("logs = %v, %v", lines, err)
	}
	if b, err := os.ReadFile(n.d.Logs() + "/crashy.flaky.log"); err != nil || !strings.Contains(string(b), "failing at start") {
		t.Errorf("log file: %v", err)
	}
}

func TestKilledServerIsRestarted(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	cs := n.client(t)
	out, _ := call(t, cs, "demo__whoami", nil)
	var who struct{ PID int }
	json.Unmarshal([]byte(out), &who)
	if who.PID == 0 {
		t.Fatalf("whoami: %q", out)
	}
	if err := syscall.Kill(who.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "restart after SIGKILL", func() bool {
		s := n.server(t, "demo", "main")
		return s.Restarts >= 1 && s.State == api.StateUnsandboxed
	})
	waitFor(t, 10*time.Second, "tools back", func() bool {
		out, isErr := call(t, cs, "demo__echo", map[string]any{"text": "back"})
		return !isErr && out == "back"
	})
}

func TestPreToolUseHookBlocksCall(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "claude-hooks", "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	n.waitState(t, "claude-hooks", "notes", api.StateUnsandboxed)
	cs := n.client(t)
	out, isErr := call(t, cs, "claude-hooks__echo", map[string]any{"text": "this is forbidden"})
	if !isErr || !strings.Contains(out, "the word 'forbidden' is not allowed") {
		t.Errorf("blocked call answered %q (error %v)", out, isErr)
	}
	if out, isErr := call(t, cs, "claude-hooks__echo", map[string]any{"text": "fine"}); isErr || out != "fine" {
		t.Errorf("allowed call answered %q (error %v)", out, isErr)
	}
	// Another plugin's call is not the hook's to see, so not its to block.
	if out, isErr := call(t, cs, "demo__echo", map[string]any{"text": "this is forbidden"}); isErr || out != "this is forbidden" {
		t.Errorf("claude-hooks' hook reached demo's call: %q (error %v)", out, isErr)
	}
	// SessionStart ran in the plugin's own data folder.
	waitFor(t, 10*time.Second, "SessionStart hook", func() bool {
		_, err := os.Stat(n.d.Home("claude-hooks") + "/sessions")
		return err == nil
	})
}

func TestEventStreamStartsWithStatusAndFollowsChanges(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := api.NewClient(n.d.Control()).Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := <-evs
	if first.Type != "status" || first.Status == nil {
		t.Fatalf("first event %+v; want a full status", first)
	}
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	if err := api.NewClient(n.d.Control()).Restart(context.Background(), "demo", "main"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Type == "server" && ev.Server.Plugin == "demo" && ev.Server.State == api.StateStarting {
				return
			}
		case <-deadline:
			t.Fatal("no server event after a restart")
		}
	}
}

func TestStatusFilesWrittenOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	waitFor(t, 5*time.Second, "status.json", func() bool {
		b, err := os.ReadFile(n.d.Status())
		return err == nil && strings.Contains(string(b), `"demo"`)
	})
	for _, p := range []string{n.d.Status(), n.d.Health(), n.d.Control(), n.d.MCP()} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s mode %v: readable by others", p, fi.Mode().Perm())
		}
	}
}

func TestPluginAddedAndRemovedLive(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	changed := make(chan struct{}, 16)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", n.d.MCP())
	}}}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://node/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	installFixture(t, n.d, "egress-demo", 1)
	n.dm.Reconcile()
	n.waitState(t, "egress-demo", "fetcher", api.StateUnsandboxed)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Error("callers were not told (tools/list_changed) when a server came")
	}
	if out, isErr := call(t, cs, "egress-demo__echo", map[string]any{"text": "new"}); isErr || out != "new" {
		t.Errorf("the new plugin's tool: %q %v", out, isErr)
	}
	os.RemoveAll(n.d.Plugin("demo"))
	n.dm.Reconcile()
	waitFor(t, 10*time.Second, "demo gone", func() bool {
		for _, p := range n.status(t).Plugins {
			if p.Name == "demo" {
				return false
			}
		}
		return true
	})
}

// seen returns what hook-spy's hooks recorded (one payload a line).
func (n *node) seen(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(n.d.Home("hook-spy") + "/seen")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func TestHooksSeeOnlyTheirOwnPluginsCallsUnlessGranted(t *testing.T) {
	for _, granted := range []bool{false, true} {
		t.Run(fmt.Sprintf("granted=%v", granted), func(t *testing.T) {
			run := config.Run{Mode: policy.Off}
			if granted {
				run.HookGrants = []policy.HookGrant{{Watcher: "hook-spy", Other: "demo"}}
			}
			n := startRun(t, run, 1, "hook-spy", "demo")
			n.waitState(t, "demo", "main", api.StateUnsandboxed)
			n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
			cs := n.client(t)
			// Its own call: seen before and after, and blockable.
			if out, isErr := call(t, cs, "hook-spy__echo", map[string]any{"text": "own-call"}); isErr || out != "own-call" {
				t.Fatalf("hook-spy__echo: %q (error %v)", out, isErr)
			}
			if out, isErr := call(t, cs, "hook-spy__echo", map[string]any{"text": "spy-block"}); !isErr || !strings.Contains(out, "hook-spy blocked it") {
				t.Errorf("hook-spy's hook did not block its own call: %q (error %v)", out, isErr)
			}
			out, isErr := call(t, cs, "demo__echo", map[string]any{"text": "demo-secret spy-block"})
			seen := n.seen(t)
			if !strings.Contains(seen, "own-call") || !strings.Contains(seen, `"hook_event_name":"PostToolUse"`) {
				t.Errorf("hook-spy's hooks did not see its own call:\n%s", seen)
			}
			if granted {
				if !isErr || !strings.Contains(out, "hook-spy blocked it") || !strings.Contains(seen, "demo-secret") {
					t.Errorf("granted: demo's call answered %q (error %v); hook-spy saw:\n%s", out, isErr, seen)
				}
			} else if isErr || strings.Contains(seen, "demo-secret") || strings.Contains(seen, "demo__") {
				t.Errorf("hook-spy's hooks reached demo's call: %q (error %v); they saw:\n%s", out, isErr, seen)
			}
			st := n.status(t)
			var code string
			for _, f := range st.Findings {
				if f.Subject == "hook-spy=demo" {
					code = f.Code
				}
			}
			for _, p := range st.Plugins {
				if p.Name == "hook-spy" && granted != (len(p.HooksSee) == 1 && p.HooksSee[0] == "demo") {
					t.Errorf("hook-spy hooks_see %v", p.HooksSee)
				}
			}
			if granted && (code != api.CodeHookGrant || len(st.HookGrants) != 1 || st.HookGrants[0].Matches != "both") {
				t.Errorf("granted: finding %q, status grants %+v", code, st.HookGrants)
			}
			if !granted && (code != "" || len(st.HookGrants) != 0) {
				t.Errorf("not granted: finding %q, status grants %+v", code, st.HookGrants)
			}
		})
	}
}

// A hook's `if` rule limits it to the calls it names: agent-hooks' no-commit hook
// (matcher ".*", if "Bash(git commit:*)") runs for an agent's `git commit` and for
// nothing else, not for the gateway's own calls of agent-hooks' echo tool.
func TestHookIfRuleLimitsTheHookToMatchingCalls(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "agent-hooks")
	n.waitState(t, "agent-hooks", "main", api.StateUnsandboxed)
	cs := n.client(t)
	if out, isErr := call(t, cs, "agent-hooks__echo", map[string]any{"text": "git commit -m x"}); isErr || out != "git commit -m x" {
		t.Errorf("a gateway call ran the hook of if Bash(git commit:*): %q (error %v)", out, isErr)
	}
	bash := func(cmd string) *api.HookAnswer {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
			"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": map[string]any{"command": cmd}, "tool_use_id": "t1"})
		a, err := api.NewClient(n.d.Control()).Hook(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := bash("git commit -m 'wip'"); a.Decision != "deny" || !strings.Contains(a.Stdout, "no commits today") {
		t.Errorf("git commit: %+v", a)
	}
	if a := bash("git status"); a.Decision != "allow" || strings.Contains(a.Stdout+a.Stderr, "no commits") {
		t.Errorf("git status ran the commit hook: %+v", a)
	}
	var runs int
	for _, r := range n.status(t).HookRuns {
		if r.Plugin == "agent-hooks" && r.Source == "agent" && r.Event == "PreToolUse" {
			runs++
		}
	}
	if runs != 4 { // pre.sh twice, the two no-commit.sh hooks once
		t.Errorf("status lists %d agent hook runs; want 4: %+v", runs, n.status(t).HookRuns)
	}
}

// A plugin's slash commands (commands/*.md) are offered as prompts
// <plugin>__<command>, rendered by the node with the caller's arguments.
func TestCommandsAreServedAsPrompts(t *testing.T) {
	n := start(t, policy.Off, 1, nil, "agent-hooks", "demo")
	n.waitState(t, "agent-hooks", "main", api.StateUnsandboxed)
	cs := n.client(t)
	ctx := context.Background()
	var names []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name+"="+p.Description)
	}
	all := strings.Join(names, "\n")
	if !strings.Contains(all, "agent-hooks__review=Review a change for style-guide problems") || !strings.Contains(all, "agent-hooks__explain=Explain code simply") {
		t.Fatalf("prompts:\n%s", all)
	}
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "agent-hooks__review", Arguments: map[string]string{"arguments": "main.go errors"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != "Review main.go with a focus on errors. The whole request was: main.go errors" {
		t.Errorf("rendered prompt %+v", res.Messages[0].Content)
	}
}
