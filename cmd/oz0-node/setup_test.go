package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setup claude-code writes both project files, prints what changed, changes
// nothing the second time and takes it all out with --remove.
func TestSetupClaudeCodeProjectScope(t *testing.T) {
	project, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	os.WriteFile(filepath.Join(project, ".mcp.json"), []byte("{\n  \"mcpServers\": {\n    \"db\": {\n      \"command\": \"db-mcp\"\n    }\n  }\n}\n"), 0o644)
	r := cliRun(t, "--data-dir", data, "setup", "claude-code", "--scope", "project", "--project", project)
	if r.code != 0 || !strings.Contains(r.stdout, "MCP server oz0 added") || !strings.Contains(r.stdout, "added for 33 events") || !strings.Contains(r.stdout, "backup: ") {
		t.Fatalf("setup:\n%s", r)
	}
	settings, _ := os.ReadFile(filepath.Join(project, ".claude", "settings.json"))
	mcpJSON, _ := os.ReadFile(filepath.Join(project, ".mcp.json"))
	if !strings.Contains(string(settings), " hook\"") || !strings.Contains(string(mcpJSON), "\"--agent-hooks\"") || !strings.Contains(string(mcpJSON), "\"db-mcp\"") {
		t.Errorf("files after setup:\n%s\n%s", settings, mcpJSON)
	}
	if r := cliRun(t, "--data-dir", data, "setup", "claude-code", "--scope", "project", "--project", project); r.code != 0 || strings.Count(r.stdout, "unchanged") != 2 {
		t.Errorf("second setup:\n%s", r)
	}
	if r := cliRun(t, "--data-dir", data, "setup", "claude-code", "--scope", "project", "--project", project, "--remove"); r.code != 0 || !strings.Contains(r.stdout, "removed") {
		t.Errorf("--remove:\n%s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(project, ".mcp.json")); strings.Contains(string(b), "oz0") || !strings.Contains(string(b), "db-mcp") {
		t.Errorf(".mcp.json after --remove:\n%s", b)
	}
	if r := cliRun(t, "setup", "claude-code", "--scope", "nowhere"); r.code != 2 {
		t.Errorf("--scope nowhere:\n%s", r)
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
