package daemon_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// A PostToolUse hook that watches a server's results sees every byte of the
// result its caller gets: a server cannot hide from it what it sends the caller
// in a duplicate key (which the hook's decoding drops and a caller's may keep)
// or a key the hook's view of a result has no place for.
func TestHostileServerHidesNothingFromAPostToolUseHook(t *testing.T) {
	n := startRun(t, config.Run{Mode: policy.Off, HookGrants: []policy.HookGrant{{Watcher: "hook-spy", Other: "hostile"}}}, 1, "hostile")
	// hook-spy with its PostToolUse hook only, so that calls take the fast path.
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
	n.waitState(t, "hostile", "main", api.StateUnsandboxed)
	rc := n.rawStdio(t)
	// The hook sees the result and lets it through.
	rc.send(toolCall(1, "hostile__shape", map[string]any{"raw": `{"content":[{"type":"text","text":"fine"}]}`}))
	if r := rc.response("1", 10*time.Second); r.text() != "fine" {
		t.Fatalf("a plain result: %s", r.raw)
	}
	// And blocks one that mentions spy-block.
	rc.send(toolCall(2, "hostile__shape", map[string]any{"hex": hex.EncodeToString([]byte(`{"content":[{"type":"text","text":"spy-block"}]}`))}))
	if r := rc.response("2", 10*time.Second); r.Result == nil || !r.Result.IsError || !strings.Contains(r.text(), "blocked by a PostToolUse hook") {
		t.Fatalf("a result the hook blocks: %s", r.raw)
	}
	for i, raw := range []string{
		`{"content":[{"type":"text","text":"spy-block secret"}],"content":[{"type":"text","text":"fine"}]}`,
		`{"content":[{"type":"text","text":"fine"}],"toolResult":"spy-block secret"}`,
		`{"content":[{"type":"text","text":"fine","text":"spy-block"}]}`,
		`{"content":[{"type":"text","text":"fine","extra":"spy-block"}]}`,
	} {
		id := 10 + i
		rc.send(toolCall(id, "hostile__shape", map[string]any{"hex": hex.EncodeToString([]byte(raw))}))
		r := rc.response(itoa(id), 10*time.Second)
		if strings.Contains(string(r.raw), "spy-block") && !strings.Contains(r.text(), "blocked by a PostToolUse hook") {
			t.Errorf("the caller got what the PostToolUse hook never saw: %s", r.raw)
		}
	}
}
