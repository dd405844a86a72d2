package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Claude Code's hook payloads, replayed through the real `oz0-node hook` against
// the fixture plugins agent-hooks (allows, denies by exit 2 and by JSON, asks, adds
// context, stops, times out, crashes, prints garbage) and hook-spy (records every
// payload, blocks on "spy-block"), in real sandboxes: by itself, and beside a
// running node.

type hookCase struct {
	name    string
	payload map[string]any
	exit    int
	// decision is the merged PreToolUse permissionDecision ("" for none).
	decision string
	stdout   []string // substrings of stdout
	stderr   []string // substrings of stderr
	noOut    bool     // stdout must be empty
}

func basePayload(event string, more map[string]any) map[string]any {
	p := map[string]any{"session_id": "0b9e6c3a-e2e", "transcript_path": "/home/dev/.claude/projects/p/0b9e.jsonl",
		"cwd": "/home/dev/project", "permission_mode": "default", "hook_event_name": event}
	for k, v := range more {
		p[k] = v
	}
	return p
}

func bashCall(cmd string) map[string]any {
	return basePayload("PreToolUse", map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": cmd, "description": "e2e"}, "tool_use_id": "toolu_01"})
}

var hookCases = []hookCase{
	{name: "Bash allowed by silence", payload: bashCall("ls"), noOut: true},
	{name: "Bash denied by exit 2", payload: bashCall("rm -rf build"), decision: "deny", stdout: []string{"[agent-hooks] agent-hooks: rm -rf is not allowed"}},
	{name: "Bash denied by JSON", payload: bashCall("psql -c drop-table"), decision: "deny", stdout: []string{"[agent-hooks] agent-hooks: no dropping tables"}},
	{name: "Bash ask", payload: bashCall("sudo true"), decision: "ask", stdout: []string{"sudo needs you"}},
	{name: "deny of one plugin beats ask of another", payload: bashCall("sudo spy-block"), decision: "deny",
		stdout: []string{"[hook-spy] hook-spy blocked it"}},
	// agent-hooks does not own Bash: its allow and rewritten command are dropped
	// (docs/promises.md §15); TestE2EHookAnswersCarryNoAuthorityTheirPluginDoesNotHold
	// has the attacker's version, and the approved one.
	{name: "allow with an updatedInput for Bash: dropped", payload: bashCall("ls -l"), noOut: true, stderr: []string{"answered beyond its authority", "hookSpecificOutput.updatedInput"}},
	{name: "if rule: git commit", payload: bashCall("git commit -m wip"), decision: "deny", stdout: []string{"no commits today"}},
	{name: "timeout does not block", payload: bashCall("sleepy"), noOut: true, stderr: []string{"agent-hooks: timed out"}},
	{name: "crash does not block", payload: bashCall("crashme"), noOut: true, stderr: []string{"plugin agent-hooks: exited"}},
	{name: "garbage does not block", payload: bashCall("garbage"), noOut: true, stderr: []string{"not the hook JSON"}},
	{name: "PostToolUse context", payload: basePayload("PostToolUse", map[string]any{"tool_name": "Write",
		"tool_input": map[string]any{"file_path": "/home/dev/project/a.go", "content": "package a"}, "tool_response": map[string]any{"success": true}}),
		stdout: []string{`"additionalContext":"agent-hooks: formatted the file"`}},
	{name: "UserPromptSubmit plain context", payload: basePayload("UserPromptSubmit", map[string]any{"prompt": "add a test"}),
		stdout: []string{"agent-hooks: the style guide applies"}},
	{name: "UserPromptSubmit blocked", payload: basePayload("UserPromptSubmit", map[string]any{"prompt": "my password is hunter2"}),
		stdout: []string{`"decision":"block"`, "[agent-hooks] agent-hooks: prompts must not hold passwords"}},
	{name: "Stop goes on", payload: basePayload("Stop", map[string]any{"stop_hook_active": false}), noOut: true},
	{name: "Stop for good", payload: basePayload("Stop", map[string]any{"stop_hook_active": false, "transcript_path": "/tmp/stop-for-good.jsonl"}),
		stdout: []string{`"continue":false`, "[agent-hooks] agent-hooks: budget spent"}},
	{name: "SessionStart startup", payload: basePayload("SessionStart", map[string]any{"source": "startup"}),
		stdout: []string{"agent-hooks: session context"}},
	{name: "SessionStart resume: matcher says no", payload: basePayload("SessionStart", map[string]any{"source": "resume"}), noOut: true},
	{name: "a plugin's own tool", payload: basePayload("PreToolUse", map[string]any{"tool_name": "mcp__oz0__hook-spy__echo",
		"tool_input": map[string]any{"text": "spy-block"}}), decision: "deny", stdout: []string{"hook-spy blocked it"}},
	{name: "another plugin's tool is not hook-spy's", payload: basePayload("PreToolUse", map[string]any{"tool_name": "mcp__oz0__demo__echo",
		"tool_input": map[string]any{"text": "demo-secret spy-block"}}), noOut: true},
	{name: "another plugin's tool under another MCP server name is not hook-spy's", payload: basePayload("PreToolUse", map[string]any{
		"tool_name": "mcp__mynode__agent-hooks__echo", "tool_input": map[string]any{"text": "renamed-secret spy-block"}}), noOut: true},
}

func replayHook(t *testing.T, n *e2eNode, c hookCase) (string, string, int, time.Duration) {
	t.Helper()
	b, _ := json.Marshal(c.payload)
	cmd := exec.Command(n.bin, "--data-dir", n.data, "hook")
	cmd.Stdin = bytes.NewReader(b)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code, time.Since(start)
}

func checkHookCase(t *testing.T, n *e2eNode, c hookCase) {
	t.Helper()
	out, errOut, code, took := replayHook(t, n, c)
	if code != c.exit {
		t.Errorf("%s: exit %d; want %d\nstdout %s\nstderr %s", c.name, code, c.exit, out, errOut)
	}
	if took > 20*time.Second {
		t.Errorf("%s: took %s", c.name, took)
	}
	if c.noOut && strings.TrimSpace(out) != "" {
		t.Errorf("%s: stdout %q; want none", c.name, out)
	}
	for _, s := range c.stdout {
		if !strings.Contains(out, s) {
			t.Errorf("%s: stdout lacks %q:\n%s\nstderr %s", c.name, s, out, errOut)
		}
	}
	for _, s := range c.stderr {
		if !strings.Contains(errOut, s) {
			t.Errorf("%s: stderr lacks %q:\n%s", c.name, s, errOut)
		}
	}
	if strings.TrimSpace(out) != "" {
		var ans struct {
			HSO struct {
				PermissionDecision string `json:"permissionDecision"`
			} `json:"hookSpecificOutput"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil {
			t.Errorf("%s: stdout is not JSON: %v\n%s", c.name, err, out)
		}
		if ans.HSO.PermissionDecision != c.decision {
			t.Errorf("%s: permissionDecision %q; want %q", c.name, ans.HSO.PermissionDecision, c.decision)
		}
	}
}

func TestE2EHookCommandAnswersClaudeCodeEvents(t *testing.T) {
	backends := backendsForE2E(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("not tested: git is not installed")
	}
	parent, err := os.MkdirTemp("", "oz0-e2e-hook-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	failOnLeftMounts(t, parent)
	os.Chmod(parent, 0o711)
	n := &e2eNode{t: t, bin: buildBinary(t), data: filepath.Join(parent, "data"), log: &bytes.Buffer{}}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("node log:\n%s", n.log.String())
		}
	})
	for _, p := range []string{"agent-hooks", "hook-spy"} {
		repo, _ := gitRepo(t, parent, p)
		if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
			t.Fatalf("install %s: %v\n%s", p, err, out)
		}
	}
	seen := n.spySaw
	t.Run("standalone", func(t *testing.T) {
		for _, c := range hookCases {
			checkHookCase(t, n, c)
		}
		s := seen()
		if !strings.Contains(s, `"tool_name":"Bash"`) || !strings.Contains(s, `"tool_name":"mcp__oz0__hook-spy__echo"`) {
			t.Errorf("hook-spy did not see the agent's and its own calls:\n%s", s)
		}
		if strings.Contains(s, "demo-secret") || strings.Contains(s, "renamed-secret") {
			t.Errorf("hook-spy saw another plugin's call:\n%s", s)
		}
		// Without a node, each run is still a line of the audit stream.
		runs := 0
		for _, r := range n.auditLines() {
			if r.Kind == "hook" && r.Source == "agent" && r.Plugin != "" && r.Event != "" {
				runs++
			}
		}
		if runs == 0 {
			t.Error("the hook runs without a node are not in the audit stream")
		}
	})
	t.Run("beside a running node", func(t *testing.T) {
		n.start("--backend", backends[0], "--plugin-hooks-project", "agent-hooks")
		n.waitState("agent-hooks", "main", "running")
		os.Remove(filepath.Join(n.dir().Home("hook-spy"), "seen"))
		os.Remove(filepath.Join(n.dir().HookHome("hook-spy"), "seen"))
		for _, c := range hookCases {
			checkHookCase(t, n, c)
		}
		if s := seen(); !strings.Contains(s, `"tool_name":"Bash"`) || strings.Contains(s, "demo-secret") {
			t.Errorf("hook-spy's record beside the node:\n%s", s)
		}
		var deny, timeout bool
		for _, r := range n.status().HookRuns {
			deny = deny || (r.Source == "agent" && r.Plugin == "agent-hooks" && r.Decision == "deny" && r.Seconds > 0)
			timeout = timeout || (r.Source == "agent" && r.Decision == "timeout")
		}
		if !deny || !timeout {
			t.Errorf("status lacks the agent's hook runs: %+v", n.status().HookRuns)
		}
		if out, _ := n.oz("status"); !strings.Contains(out, "hook agent-hooks") || !strings.Contains(out, "--plugin-hooks-project agent-hooks") {
			t.Errorf("oz0-node status does not list hook runs and the project grant:\n%s", out)
		}

		// The node's --plugin-hooks-project: the project, read-only, for agent-hooks.
		project := filepath.Join(parent, "project")
		os.Mkdir(project, 0o777)
		os.Chmod(project, 0o777)
		os.WriteFile(filepath.Join(project, "node-plan.txt"), []byte("plan"), 0o644)
		pc := hookCase{name: "project beside the node", payload: bashCall("whoami-project"), decision: "deny",
			stdout: []string{"node-plan.txt", "write: refused", "pwd: " + project}}
		pc.payload["cwd"] = project
		checkHookCase(t, n, pc)
		var shown bool
		for _, r := range n.status().HookRuns {
			shown = shown || (r.Plugin == "agent-hooks" && r.Project == project)
		}
		if !shown {
			t.Errorf("status hook runs do not name the project: %+v", n.status().HookRuns)
		}
		if out, _ := n.oz("sandbox", "show", "agent-hooks"); !strings.Contains(out, "# hooks: read the agent session's project") {
			t.Errorf("sandbox show does not say the hooks read the project:\n%s", out)
		}

		// No double firing: a client that forwards its hooks (mcp --agent-hooks)
		// gets no gateway hooks around its calls; another client still does.
		bridge := func(args ...string) *mcp.ClientSession {
			cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data, "mcp"}, args...)...)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
				Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cs.Close() })
			return cs
		}
		n.waitState("hook-spy", "main", "running")
		ctx := context.Background()
		out, isErr, err := callText(ctx, bridge("--agent-hooks"), &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "forwarding-client spy-block"}})
		if err != nil || isErr || out != "forwarding-client spy-block" {
			t.Errorf("--agent-hooks client: the gateway fired hook-spy's hook itself: %q %v %v", out, isErr, err)
		}
		if s := seen(); strings.Contains(s, "forwarding-client") {
			t.Errorf("--agent-hooks client: hook-spy's hooks ran for its call:\n%s", s)
		}
		out, isErr, err = callText(ctx, bridge(), &mcp.CallToolParams{Name: "hook-spy__echo", Arguments: map[string]any{"text": "plain-client spy-block"}})
		if err != nil || !isErr || !strings.Contains(out, "hook-spy blocked it") {
			t.Errorf("plain client: the gateway did not fire hook-spy's hook: %q %v %v", out, isErr, err)
		}

		t.Run("MCP Inspector CLI", func(t *testing.T) {
			inspector := inspectorCLI(t)
			run := func(args ...string) string {
				cmd := exec.Command("node", append([]string{inspector, n.bin, "--data-dir", n.data, "mcp", "--agent-hooks"}, args...)...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("inspector %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			if out := run("--method", "tools/call", "--tool-name", "agent-hooks__echo", "--tool-arg", "text=from the inspector"); !strings.Contains(out, `"text": "from the inspector"`) {
				t.Errorf("tools/call through the bridge:\n%s", out)
			}
			if out := run("--method", "prompts/get", "--prompt-name", "agent-hooks__review", "--prompt-args", "arguments=main.go errors"); !strings.Contains(out, "Review main.go with a focus on errors.") {
				t.Errorf("prompts/get of a plugin command through the bridge:\n%s", out)
			}
		})
	})
}

// A hook sees the session's project only when the operator grants its plugin, and
// then read-only; proven in the real sandbox through `oz0-node hook` by itself.
func TestE2EHookSeesTheProjectOnlyByGrant(t *testing.T) {
	backendsForE2E(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("not tested: git is not installed")
	}
	parent, err := os.MkdirTemp("", "oz0-e2e-project-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	failOnLeftMounts(t, parent)
	os.Chmod(parent, 0o755) // readable by the plugin's user, as a developer's project is
	project := filepath.Join(parent, "project")
	os.Mkdir(project, 0o755)
	// Writable by anyone on the host, so that only the read-only bind keeps a hook
	// (whatever user it runs as) from writing there.
	os.Chmod(project, 0o777)
	os.WriteFile(filepath.Join(project, "secret-plan.txt"), []byte("plan"), 0o644)
	n := &e2eNode{t: t, bin: buildBinary(t), data: filepath.Join(parent, "data"), log: &bytes.Buffer{}}
	repo, _ := gitRepo(t, parent, "agent-hooks")
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	payload := bashCall("whoami-project")
	payload["cwd"] = project
	run := func(flags ...string) string {
		b, _ := json.Marshal(payload)
		cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data, "hook"}, flags...)...)
		cmd.Stdin = bytes.NewReader(b)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hook %v: %v\n%s", flags, err, out)
		}
		return string(out)
	}
	out := run()
	if strings.Contains(out, "secret-plan.txt") || !strings.Contains(out, "write: refused") || !strings.Contains(out, "project-dir: none") {
		t.Errorf("without the grant the hook saw the project:\n%s", out)
	}
	out = run("--plugin-hooks-project", "agent-hooks")
	if !strings.Contains(out, "secret-plan.txt") || !strings.Contains(out, "pwd: "+project) || !strings.Contains(out, "project-dir: "+project) {
		t.Errorf("with the grant the hook did not see the project:\n%s", out)
	}
	if !strings.Contains(out, "write: refused") {
		t.Errorf("with the grant the hook could write the project:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(project, "written-by-hook")); err == nil {
		t.Error("a hook wrote into the project")
	}
	// Another plugin's grant is not this one's; and the data folder is never a project.
	if out := run("--plugin-hooks-project", "hook-spy"); strings.Contains(out, "secret-plan.txt") {
		t.Errorf("hook-spy's grant showed agent-hooks the project:\n%s", out)
	}
	payload["cwd"] = n.data
	if out := run("--plugin-hooks-project", "agent-hooks"); strings.Contains(out, "node.key") || strings.Contains(out, "ledger") || strings.Contains(out, "pwd: "+n.data+"\\n") {
		t.Errorf("the data folder was handed over as the project:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(n.data, "written-by-hook")); err == nil {
		t.Error("a hook wrote into the data folder")
	}
	if out, _ := n.oz("sandbox", "show", "agent-hooks"); !strings.Contains(out, "# hooks: do not see the agent session's project") {
		t.Errorf("sandbox show does not say the hooks see no project:\n%s", out)
	}
}

// inspectorCLI installs the MCP Inspector's CLI (a client no one here wrote) from
// the npm registry once per machine and returns its entry script; it skips, saying
// so, where npm or the registry is not at hand.
func inspectorCLI(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("not tested: npm is not installed, so the MCP Inspector CLI cannot be")
	}
	dir := filepath.Join(os.TempDir(), "oz0-e2e-inspector-cli-1.0.3")
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "build", "index.js")
	if _, err := os.Stat(entry); err != nil {
		os.MkdirAll(dir, 0o755)
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", dir, "@modelcontextprotocol/inspector-cli@1.0.3")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("not tested: npm install of the MCP Inspector CLI failed (registry unreachable?): %v\n%s", err, out)
		}
	}
	// The published CLI reads its version from its monorepo's package.json, one
	// folder above the package.
	os.WriteFile(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "package.json"), []byte(`{"name":"@modelcontextprotocol/inspector","version":"1.0.3"}`), 0o644)
	return entry
}
