package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// cliRunIn is cliRun on the data folder data, named by the environment (as a
// user's default is) rather than by --data-dir.
func cliRunIn(t *testing.T, data string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1", datadir.EnvVar+"="+data)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run oz0-node %q: %v", args, err)
	}
	return r
}

// installForSetup installs fixture plugins into a new data folder the way an
// install leaves them (files and active commit), without building anything.
func installForSetup(t *testing.T, plugins ...string) datadir.Dir {
	t.Helper()
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	for i, name := range plugins {
		commit := fmt.Sprintf("%040x", i+1)
		if _, err := fixtures.Extract(name, d.PluginCommit(name, commit)); err != nil {
			t.Fatal(err)
		}
		if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// settingsEvents lists the events of a settings file's hooks with the matcher of
// the node's group, and the commands of every hook.
func settingsEvents(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct {
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	events := map[string]string{}
	var cmds []string
	for ev, groups := range s.Hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				cmds = append(cmds, h.Command)
				if strings.Contains(h.Command, "oz0-node") {
					events[ev] = g.Matcher
				}
			}
		}
	}
	return events, cmds
}

// setup claude-code --scope project writes files fit to commit: the command as
// found on PATH, the data folder only as the user named it, nothing else of this
// machine, ordinary modes; it registers only the events the installed plugins
// handle, says that Claude Code asks to approve the server, changes nothing the
// second time, follows plugin removal and takes it all out with --remove.
func TestSetupClaudeCodeProjectScope(t *testing.T) {
	d := installForSetup(t, "claude-hooks", "agent-hooks")
	project := t.TempDir()
	orig := "{\n    \"mcpServers\": {\n        \"db\": {\"command\": \"db-mcp\"}\n    }\n}\n"
	os.WriteFile(filepath.Join(project, ".mcp.json"), []byte(orig), 0o644)
	settingsPath, mcpPath := filepath.Join(project, ".claude", "settings.json"), filepath.Join(project, ".mcp.json")

	r := cliRunIn(t, d.Root, "setup", "claude-code", "--scope", "project", "--project", project)
	if r.code != 0 || !strings.Contains(r.stdout, "MCP server oz0 added: oz0-node mcp --agent-hooks") || !strings.Contains(r.stdout, "backup: ") ||
		!strings.Contains(r.stdout, "approve the project MCP server \"oz0\"") || !strings.Contains(r.stdout, "pending approval") {
		t.Fatalf("setup:\n%s", r)
	}
	for _, p := range []string{settingsPath, mcpPath} {
		b, _ := os.ReadFile(p)
		for _, local := range []string{d.Root, os.Args[0], filepath.Dir(os.Args[0]), os.TempDir()} {
			if strings.Contains(string(b), local) {
				t.Errorf("%s names %s of this machine:\n%s", p, local, b)
			}
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v); want 0644", p, fi.Mode().Perm(), err)
		}
	}
	var m struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	b, _ := os.ReadFile(mcpPath)
	if err := json.Unmarshal(b, &m); err != nil || m.MCPServers["oz0"].Command != "oz0-node" || strings.Join(m.MCPServers["oz0"].Args, " ") != "mcp --agent-hooks" || m.MCPServers["db"].Command != "db-mcp" {
		t.Errorf(".mcp.json: %v\n%s", err, b)
	}
	events, cmds := settingsEvents(t, settingsPath)
	// claude-hooks: PreToolUse on its own echo, SessionStart; agent-hooks: Bash,
	// every tool's git commit (its "if"), Edit|Write results, prompts, Stop, startup.
	want := map[string]string{"PreToolUse": "", "PostToolUse": "^(?:Edit|Write|mcp__oz0__Edit|mcp__oz0__Write|mcp__oz0__agent-hooks__Edit|mcp__oz0__agent-hooks__Write)$",
		"UserPromptSubmit": "", "Stop": "", "SessionStart": ""}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events registered: %v\nwant %v", events, want)
	}
	for _, c := range cmds {
		if c != "oz0-node hook" {
			t.Errorf("hook command %q; want oz0-node hook", c)
		}
	}
	if r := cliRunIn(t, d.Root, "setup", "claude-code", "--scope", "project", "--project", project); r.code != 0 || strings.Count(r.stdout, "unchanged") != 2 {
		t.Errorf("second setup:\n%s", r)
	}

	// Keeping in step: agent-hooks removed, its events go.
	if r := cliRunIn(t, d.Root, "plugin", "remove", "agent-hooks", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "removed from 3 events: UserPromptSubmit, PostToolUse, Stop") {
		t.Errorf("plugin remove:\n%s", r)
	}
	events, _ = settingsEvents(t, settingsPath)
	want = map[string]string{"PreToolUse": "^(?:echo|mcp__oz0__claude-hooks__echo|mcp__oz0__echo)$", "SessionStart": ""}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("after plugin remove: %v\nwant %v", events, want)
	}

	if r := cliRunIn(t, d.Root, "setup", "claude-code", "--scope", "project", "--project", project, "--remove"); r.code != 0 || !strings.Contains(r.stdout, "removed") {
		t.Errorf("--remove:\n%s", r)
	}
	if b, _ := os.ReadFile(mcpPath); string(b) != orig {
		t.Errorf(".mcp.json after --remove:\n%s", b)
	}
	// Forgotten: a later removal leaves the project alone.
	before, _ := os.ReadFile(settingsPath)
	if r := cliRunIn(t, d.Root, "plugin", "remove", "claude-hooks", "--yes"); r.code != 0 || strings.Contains(r.stdout, "Claude Code settings") {
		t.Errorf("plugin remove after setup --remove:\n%s", r)
	}
	if after, _ := os.ReadFile(settingsPath); string(after) != string(before) {
		t.Errorf("settings changed after setup --remove:\n%s", after)
	}
	if r := cliRun(t, "setup", "claude-code", "--scope", "nowhere"); r.code != 2 {
		t.Errorf("--scope nowhere:\n%s", r)
	}
}

// A data folder the user names goes into the project's files as named; with no
// plugin hooks setup writes no hook entry and says so.
func TestSetupProjectScopeWithANamedDataFolder(t *testing.T) {
	project := t.TempDir()
	r := cliRun(t, "--data-dir", "../shared/oz0-data", "setup", "claude-code", "--scope", "project", "--project", project)
	if r.code != 0 || !strings.Contains(r.stdout, "oz0-node --data-dir ../shared/oz0-data mcp --agent-hooks") || !strings.Contains(r.stdout, "No installed plugin has hooks") {
		t.Fatalf("setup:\n%s", r)
	}
	if b, err := os.ReadFile(filepath.Join(project, ".claude", "settings.json")); err == nil && strings.Contains(string(b), "hook") {
		t.Errorf("hook entries with no plugin hooks:\n%s", b)
	}
}

// oz0-node hook answers a payload it cannot read with a plain error (exit 1, which
// Claude Code treats as a non-blocking hook error, never as a block), and an event
// no installed plugin's hook reaches with silence.
func TestHookCommandWithoutPluginsOrWithBadInput(t *testing.T) {
	g := &globals{dataDir: filepath.Join(t.TempDir(), "data")}
	var out, errOut strings.Builder
	for _, bad := range []string{"", "not json", `{"hook_event_name":"NoSuchEvent"}`, `[]`} {
		err := runHook(context.Background(), g, "auto", hookFlags{}, strings.NewReader(bad), &out, &errOut)
		var ee *exitError
		if err == nil || (errors.As(err, &ee) && ee.code == 2) {
			t.Errorf("payload %q: %v", bad, err)
		}
	}
	payload := `{"session_id":"s","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}`
	if err := runHook(context.Background(), g, "auto", hookFlags{}, strings.NewReader(payload), &out, &errOut); err != nil || out.Len() != 0 {
		t.Errorf("no plugins: %v, stdout %q", err, out.String())
	}
}
