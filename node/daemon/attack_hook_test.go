package daemon_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/policy"
)

// A PostToolUse hook that watches a server's results sees every byte of the
// result its caller gets: a server cannot hide from it what it sends the caller
// in a duplicate key (which the hook's decoding drops and a caller's may keep)
// or a key the hook's view of a result has no place for.
func TestHostileServerHidesNothingFromAPostToolUseHook(t *testing.T) {
	n := startRun(t, config.Run{Mode: policy.Off, HookGrants: []policy.HookGrant{{Watcher: "hook-spy", Other: "hostile"}}}, 1, "hostile")
	n.installPostOnlySpy(t)
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
