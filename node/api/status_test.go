package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"oz0.ai/node/internal/golden"
)

// fullStatus has every field set, so the golden file shows every JSON name.
func fullStatus() Status {
	return Status{
		Node: NodeInfo{Version: "v1", PID: 42, Started: "2026-01-02T03:04:05Z", DataDir: "/var/lib/oz0-node", OS: "linux",
			Root: true, Tier: 1, Backend: "bwrap", Backends: []BackendProbe{{Name: "runsc", Works: false, Version: "x", Error: "not found"}},
			Mode: "strict", Labels: map[string]string{"zone": "eu"}, NotCovers: []string{"shared kernel"}, Users: "per-plugin",
			Control: "/c.sock", MCP: "/m.sock", Health: "ok", Updated: "2026-01-02T03:04:06Z", Uptime: "1s"},
		Plugins: []Plugin{{Name: "demo", ID: "dev.x/demo", Version: "1", Commit: "abc", Source: "https://git/x", InstalledBy: "ops",
			InstalledAt: "2026-01-01T00:00:00Z", Private: true, Exempt: true, User: "uid 1900000001", UID: 1900000001, Backend: "bwrap",
			Servers: []Server{{Name: "main", State: StateRunning, Action: "sandboxed", Sandbox: "bwrap", Network: "proxy", User: "uid 1",
				UID: 1, Reasons: []string{"r"}, Declared: "default", Reason: "m", Restarts: 2, PID: 7, Since: "s", Tools: []string{"echo"}, LastErr: []string{"e"},
				Hidden: []HiddenTool{{Tool: "demo__rm", Rule: "deny *__rm (line 1)"}}}},
			Hooks:  []Hook{{Event: "Stop", Matcher: "x", Action: "sandboxed", Sandbox: "bwrap", Reasons: []string{"r"}, Timeout: 60, Capped: true}},
			Egress: []string{"api.example.com:443 — why"}, Allowed: 3, Denied: 4, HooksSee: []string{"notes"}}},
		Exempt:     []Exemption{{Flag: "demo@abc", Plugin: "demo", Commit: "abc", Matches: "commit", Detail: "d"}},
		HookGrants: []HookGrant{{Flag: "demo=notes", Watcher: "demo", Other: "notes", Matches: "both", Detail: "d"}},
		Findings:   []Finding{{Code: CodeTier0, Severity: SevCritical, Subject: "node", Message: "m", Fix: "f", Time: "t"}},
		Egress: EgressStatus{TenantList: "/t", TenantOK: true, Patterns: []string{".example.com"},
			Recent: []EgressDecision{{Time: "t", Plugin: "demo", Server: "main", Host: "h", Port: 443, Addr: "1.1.1.1", Decision: "deny", Rule: "tenant", Bytes: 5, Seconds: 1.5}}},
		ToolRules: ToolRulesStatus{Path: "/t/tools", Present: true, OK: false, Rules: 2, Error: "line 2"},
		Approvals: []Approval{{ID: "1", Kind: "egress", Plugin: "demo", Server: "main", Tool: "demo__rm", Host: "h", Port: 443, Reason: "why",
			Refusal: "tenant", Asked: 2, Waiting: 1, Since: "s", Expires: "e", Always: true}},
		ApprovalWait: "30s",
	}
}

// The JSON names are an interface (status.json, the control API, scripts): a
// rename must show up as a golden diff.
func TestStatusJSONFieldNamesAreStable(t *testing.T) {
	golden.Check(t, "status.golden.json", indented(t, fullStatus()))
	golden.Check(t, "health.golden.json", indented(t, Health{Status: "ok", PID: 1, Updated: "t", Tier: 1, Running: 2, Refused: 3, Crashed: 4, Critical: 5}))
	golden.Check(t, "event.golden.json", indented(t, Event{Type: "server", Time: "t", Server: &ServerEvent{Plugin: "p", Server: "s", State: StateCrashed, Detail: "d"}}))
	// The audit stream's lines are read by scripts too (docs/audit.md).
	golden.Check(t, "audit.golden.json", indented(t, AuditRecord{Seq: 1, Time: "t", Kind: "call", Plugin: "p", Server: "s", Host: "h", Port: 443, Addr: "a",
		Decision: "allow", Rule: "r", Bytes: 9, Door: "stdio", Path: "fast", Session: "x", Tool: "p__t", RequestID: "1", Seconds: 0.5,
		Outcome: "ok", RPCError: -32602, ResultBytes: 10, ArgsSHA256: "d", Event: "PreToolUse", Source: "gateway", Network: "proxy",
		Dropped: []string{"updatedInput"}, Approval: "3", Asked: 2, By: "root (uid 0) via tui", DroppedLines: 4, CutBytes: 5, LostLines: 6}))
}

// indented is v as the golden files hold it: indented JSON and a newline.
func indented(t *testing.T, v any) []byte {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(got, '\n')
}

func TestStatusJSONRoundTrips(t *testing.T) {
	in := fullStatus()
	b, _ := json.Marshal(in)
	var out Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(out)
	if !bytes.Equal(b, b2) {
		t.Errorf("round trip changed the status:\n%s\n%s", b, b2)
	}
}

func TestEmptyStatusKeepsListsAsKeys(t *testing.T) {
	b, _ := json.Marshal(Status{})
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"node", "plugins", "exemptions", "findings", "egress"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %s missing from an empty status: %s", k, b)
		}
	}
}
