package main

import (
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/installed"
)

// status names a plugin's trustd grant and its recent sandbox denials (macOS),
// escaped as the parser left them, a few at a time.
func TestStatusShowsTrustDGrantAndSandboxDenials(t *testing.T) {
	st := &api.Status{Plugins: []api.Plugin{{
		Name: "go-tool", Commit: "0123456789abcdef", Backend: "seatbelt", User: "node user", TLSTrustD: true,
		SandboxDenials: []api.SandboxDenial{
			{Time: "2026-12-01T15:02:11Z", Process: "python3", PID: 42, Operation: "file-read-data", Target: `/Users/dev/x\n\x1b[2J`, Count: 1},
			{Time: "2026-12-01T15:02:10Z", Process: "node", PID: 43, Operation: "network-outbound", Target: "93.184.216.34:443", Count: 1},
			{Time: "2026-12-01T15:02:09Z", Process: "node", PID: 43, Operation: "mach-lookup", Target: "com.apple.trustd.agent", Count: 1, Hint: "grant it with --plugin-tls-trustd go-tool"},
			{Time: "2026-12-01T15:02:08Z", Process: "node", PID: 43, Operation: "process-fork", Count: 1},
		},
	}}}
	var b strings.Builder
	printStatus(&b, st)
	out := b.String()
	for _, want := range []string{"tls-trustd", `sandbox denied file-read-data /Users/dev/x\n\x1b[2J  (python3[42]`, "network-outbound 93.184.216.34:443", "    hint: grant it with --plugin-tls-trustd go-tool", "1 more sandbox denials"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b") {
		t.Errorf("status carries a raw escape:\n%q", out)
	}
}

// plugin show lists the running node's recent sandbox denials of the plugin.
func TestPluginShowListsSandboxDenials(t *testing.T) {
	r := pluginShow{Installed: &installed.Plugin{Meta: installed.Meta{Name: "demo"}}, Ledger: []installed.LedgerEntry{},
		SandboxDenials: []api.SandboxDenial{{Time: "2026-12-01T15:02:11Z", Process: "node", PID: 43, Operation: "network-outbound", Target: "93.184.216.34:443", Count: 1}}}
	var b strings.Builder
	printPluginShow(&b, r, config.Run{})
	if !strings.Contains(b.String(), "recent sandbox denials\n  2026-12-01T15:02:11Z  network-outbound 93.184.216.34:443  (node[43])") {
		t.Errorf("plugin show:\n%s", b.String())
	}
}
