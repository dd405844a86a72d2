package agentsetup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/internal/golden"
)

var testNode = Node{Argv: []string{"/usr/local/bin/oz0-node", "--data-dir", "/home/dev/.local/share/oz0 node"}}

// testHooks are the entries of a node whose plugins guard Bash, watch every
// tool's result, read prompts and start sessions.
var testHooks = []Registration{
	{Event: "SessionStart", Matcher: "startup"},
	{Event: "UserPromptSubmit"},
	{Event: "PreToolUse", Matcher: "Bash|mcp__oz0__Bash|mcp__oz0__guard__Bash"},
	{Event: "PostToolUse"},
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(to), 0o755)
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Setup into existing user settings keeps everything there, a second run changes
// nothing, and --remove gives back the files as they were, byte for byte.
func TestSetupUserScopeKeepsSettingsIsIdempotentAndReversible(t *testing.T) {
	home := t.TempDir()
	f, err := FilesFor(ScopeUser, home, "")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, "testdata/settings.json", f.Settings)
	copyFile(t, "testdata/claude.json", f.MCP)
	now := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

	cs, err := Apply(f, testNode, Options{Hooks: testHooks, Backup: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if len(c.Changes) == 0 || c.Backup == "" {
			t.Errorf("first run: %+v", c)
		}
		b, _ := os.ReadFile(c.Backup)
		orig, _ := os.ReadFile(filepath.Join("testdata", map[string]string{f.Settings: "settings.json", f.MCP: "claude.json"}[c.File]))
		if string(b) != string(orig) {
			t.Errorf("backup %s is not the file as it was", c.Backup)
		}
	}
	settings, _ := os.ReadFile(f.Settings)
	claude, _ := os.ReadFile(f.MCP)
	golden.Check(t, "settings.setup.golden", settings)
	golden.Check(t, "claude.setup.golden", claude)
	if fi, _ := os.Stat(f.MCP); fi.Mode().Perm() != 0o600 {
		t.Errorf("~/.claude.json mode %v; want its own 0600 kept", fi.Mode().Perm())
	}

	cs, err = Apply(f, testNode, Options{Hooks: testHooks, Backup: true, Now: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if len(c.Changes) != 0 || c.Backup != "" {
			t.Errorf("second run changed %s: %v", c.File, c.Changes)
		}
	}
	if again, _ := os.ReadFile(f.Settings); string(again) != string(settings) {
		t.Error("second run rewrote settings.json")
	}

	if _, err := Apply(f, testNode, Options{Remove: true, Backup: true, Now: now.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for file, orig := range map[string]string{f.Settings: "testdata/settings.json", f.MCP: "testdata/claude.json"} {
		got, _ := os.ReadFile(file)
		want, _ := os.ReadFile(orig)
		if string(got) != string(want) {
			t.Errorf("--remove did not restore %s:\n%s", file, got)
		}
	}
}

// Project scope into a project without settings creates both files; --dry-run
// writes nothing; --remove takes away what setup wrote.
func TestSetupProjectScopeFromNothing(t *testing.T) {
	project := t.TempDir()
	f, _ := FilesFor(ScopeProject, "", project)
	now := time.Now()
	cs, err := Apply(f, testNode, Options{Hooks: testHooks, DryRun: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || len(cs[0].Changes) == 0 || len(cs[1].Changes) == 0 {
		t.Errorf("dry run reports %+v", cs)
	}
	if _, err := os.Stat(f.Settings); err == nil {
		t.Error("--dry-run wrote settings")
	}
	if _, err := Apply(f, testNode, Options{Hooks: testHooks, Now: now}); err != nil {
		t.Fatal(err)
	}
	mcpJSON, _ := os.ReadFile(f.MCP)
	golden.Check(t, "mcp.project.golden", mcpJSON)
	settings, _ := os.ReadFile(f.Settings)
	if !strings.Contains(string(settings), `"command": "/usr/local/bin/oz0-node --data-dir '/home/dev/.local/share/oz0 node' hook"`) ||
		!strings.Contains(string(settings), `"UserPromptSubmit"`) || !strings.Contains(string(settings), `"timeout": 90`) {
		t.Errorf("project settings:\n%s", settings)
	}
	if _, err := Apply(f, testNode, Options{Remove: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Settings, f.MCP} {
		if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) != "{}" {
			t.Errorf("after --remove %s holds:\n%s", p, b)
		}
	}
}

// A moved binary updates the entries in place instead of adding second ones.
func TestSetupAfterTheBinaryMovedReplacesItsEntries(t *testing.T) {
	out, _, err := MergeSettings(nil, testNode, testHooks, false)
	if err != nil {
		t.Fatal(err)
	}
	moved := Node{Argv: []string{"/opt/oz0/bin/oz0-node"}}
	out2, changes, err := MergeSettings(out, moved, testHooks, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out2), "oz0-node") != strings.Count(string(out), "oz0-node") || strings.Contains(string(out2), "/usr/local/bin") {
		t.Errorf("moved binary:\n%s", out2)
	}
	if len(changes) != 1 || !strings.Contains(changes[0], "updated for 4 events") {
		t.Errorf("changes %v", changes)
	}
}

func TestSetupRefusesWhatItDoesNotOwn(t *testing.T) {
	for _, c := range []struct{ name, doc string }{
		{"not an object", `[1,2]`},
		{"hooks not an object", `{"hooks": []}`},
		{"event not an array", `{"hooks": {"Stop": {}}}`},
		{"garbage", `{"a": `},
	} {
		if _, _, err := MergeSettings([]byte(c.doc), testNode, testHooks, false); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, _, err := MergeMCP([]byte(`{"mcpServers": {"oz0": {"command": "npx", "args": ["something-else"]}}}`), testNode, false); err == nil {
		t.Error("an oz0 server of the user's was overwritten")
	}
}

func TestIsOurHook(t *testing.T) {
	for cmd, want := range map[string]bool{
		"/usr/local/bin/oz0-node hook":                     true,
		"'/Users/a b/bin/oz0-node' --data-dir '/x y' hook": true,
		"oz0-node hook":               true,
		"/usr/local/bin/oz0-node mcp": false,
		"~/.claude/hooks/check.sh":    false,
		"/usr/bin/not-oz0-node hook":  false,
		"echo oz0-node hook":          false,
	} {
		if testNode.isOurHook(cmd) != want {
			t.Errorf("isOurHook(%q) != %v", cmd, want)
		}
	}
}

// plugin install and remove keep recorded setups in step, but write only a
// settings file that exists and belongs to the user running them: a record (or a
// link at its path) leading to another user's file, or to none, is said and left
// alone.
func TestSyncWritesOnlyTheUsersOwnExistingFiles(t *testing.T) {
	dir := t.TempDir()
	records := filepath.Join(dir, "agent-settings.json")
	mine, _ := FilesFor(ScopeProject, "", filepath.Join(dir, "mine"))
	gone, _ := FilesFor(ScopeProject, "", filepath.Join(dir, "gone"))
	copyFile(t, "testdata/settings.json", mine.Settings)
	for _, f := range []Files{mine, gone} {
		if err := SaveRecord(records, Record{Files: f, Argv: []string{"oz0-node"}}, false); err != nil {
			t.Fatal(err)
		}
	}
	var other Files
	if os.Geteuid() == 0 {
		other, _ = FilesFor(ScopeProject, "", filepath.Join(dir, "other"))
		copyFile(t, "testdata/settings.json", other.Settings)
		if err := os.Chown(other.Settings, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		// Reached through a link of the user's own: the link's target decides.
		link, _ := FilesFor(ScopeProject, "", filepath.Join(dir, "link"))
		os.MkdirAll(filepath.Dir(link.Settings), 0o755)
		if err := os.Symlink(other.Settings, link.Settings); err != nil {
			t.Fatal(err)
		}
		for _, f := range []Files{other, link} {
			if err := SaveRecord(records, Record{Files: f, Argv: []string{"oz0-node"}}, false); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		t.Log("not tested: a file of another user (needs root to make one)")
	}
	changes, errs := Sync(records, testHooks)
	if len(changes) != 1 || changes[0].File != mine.Settings || len(changes[0].Changes) == 0 {
		t.Errorf("changes: %+v", changes)
	}
	want := 1
	if other.Settings != "" {
		want = 3
		if b, _ := os.ReadFile(other.Settings); strings.Contains(string(b), "oz0-node") {
			t.Errorf("another user's settings were written:\n%s", b)
		}
	}
	if len(errs) != want {
		t.Errorf("errors: %v; want %d", errs, want)
	}
	if _, err := os.Stat(gone.Settings); err == nil {
		t.Error("a settings file that was gone was created")
	}
	// Forgotten, a setup is left alone.
	if err := SaveRecord(records, Record{Files: mine}, true); err != nil {
		t.Fatal(err)
	}
	if changes, _ := Sync(records, nil); len(changes) != 0 {
		t.Errorf("a forgotten setup was synced: %+v", changes)
	}
}
