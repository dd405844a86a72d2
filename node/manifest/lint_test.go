package manifest

import (
	"strings"
	"testing"
)

// warningsOf lints dir and returns its diagnostics, failing on any error.
func warningsOf(t *testing.T, dir string) (*Manifest, []Diagnostic) {
	t.Helper()
	m, diags := Lint(dir, Options{})
	for _, d := range diags {
		if d.Severity != SevWarning {
			t.Fatalf("unexpected %s", d)
		}
	}
	if m == nil {
		t.Fatalf("Lint(%s) returned no manifest", dir)
	}
	return m, diags
}

func findDiag(diags []Diagnostic, field string) (Diagnostic, bool) {
	for _, d := range diags {
		if d.Field == field {
			return d, true
		}
	}
	return Diagnostic{}, false
}

func TestLintWarnsAboutSandboxHostNamingTheExemptFlag(t *testing.T) {
	_, diags := warningsOf(t, extract(t, "host-health"))
	d, ok := findDiag(diags, `extensions."ai.oz0".servers.health.sandbox`)
	if !ok {
		t.Fatalf("no sandbox warning in %v", diags)
	}
	for _, w := range []string{"sandbox: host", "--plugin-sandbox-exempt host-health", "refuses", `"health"`} {
		if !strings.Contains(d.Message, w) {
			t.Errorf("warning %q lacks %q", d.Message, w)
		}
	}
	if d.File != "plugin.json" || !strings.HasPrefix(d.String(), "warning: plugin.json: extensions.") {
		t.Errorf("diagnostic %s", d)
	}
	if _, ok := findDiag(diags, `extensions."ai.oz0".servers.health.reason`); ok {
		t.Errorf("warned about a missing reason although the fixture gives one: %v", diags)
	}
}

func TestLintWarnsAboutSandboxOwnNamingTheExemptFlag(t *testing.T) {
	_, diags := warningsOf(t, extract(t, "own-sandbox"))
	d, ok := findDiag(diags, `extensions."ai.oz0".servers.runner.sandbox`)
	if !ok || !strings.Contains(d.Message, "sandbox: own") || !strings.Contains(d.Message, "--plugin-sandbox-exempt own-sandbox") {
		t.Errorf("diagnostics %v", diags)
	}
}

func TestLintWarnsAboutMissingReasons(t *testing.T) {
	_, diags := warningsOf(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"noreason","extensions":{"ai.oz0":{
			"egress":[{"host":"api.example.com"},{"host":"b.example.com","reason":"why"}],
			"servers":{"s":{"sandbox":"host","egress":[{"host":"api.example.com"}]}}}}}`,
		".mcp.json": `{"s":{"command":"x"}}`,
	}))
	for _, f := range []string{
		`extensions."ai.oz0".servers.s.reason`,
		`extensions."ai.oz0".egress[0].reason`,
		`extensions."ai.oz0".servers.s.egress[0].reason`,
	} {
		if _, ok := findDiag(diags, f); !ok {
			t.Errorf("no warning for %s in %v", f, diags)
		}
	}
	if _, ok := findDiag(diags, `extensions."ai.oz0".egress[1].reason`); ok {
		t.Errorf("warned about a reason that is given: %v", diags)
	}
}

func TestLintWarnsAboutBroadLeadingDotEgress(t *testing.T) {
	_, diags := warningsOf(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"broad","extensions":{"ai.oz0":{"egress":[
			{"host":".example.com","reason":"r"},
			{"host":".cdn.example.com","reason":"r"},
			{"host":".example.co.uk","reason":"r"},
			{"host":"example.com","reason":"r"}]}}}`,
	}))
	for i, broad := range []bool{true, false, true, false} {
		f := `extensions."ai.oz0".egress[` + string(rune('0'+i)) + `].host`
		d, ok := findDiag(diags, f)
		if ok != broad {
			t.Errorf("%s: warned %v, want %v (%v)", f, ok, broad, diags)
		}
		if ok && !strings.Contains(d.Message, "whole registrable domain") {
			t.Errorf("%s: %q", f, d.Message)
		}
	}
}

func TestLintOfAPlainPluginHasNoWarnings(t *testing.T) {
	for _, name := range []string{"demo", "crashy", "claude-hooks", "egress-demo"} {
		if _, diags := warningsOf(t, extract(t, name)); len(diags) != 0 {
			t.Errorf("%s: %v", name, diags)
		}
	}
}

func TestLintWarnsAboutRequiredGVisor(t *testing.T) {
	_, diags := warningsOf(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"g","extensions":{"ai.oz0":{"isolation":"gvisor"}}}`}))
	if d, ok := findDiag(diags, `extensions."ai.oz0".isolation`); !ok || !strings.Contains(d.Message, "gVisor") {
		t.Errorf("diagnostics %v", diags)
	}
}

func TestLintReportsErrorsWithFileAndField(t *testing.T) {
	m, diags := Lint(extract(t, "command-type"), Options{})
	if m != nil || len(diags) != 1 {
		t.Fatalf("manifest %v diags %v", m, diags)
	}
	d := diags[0]
	if d.Severity != SevError || d.File != ".mcp.json" || d.Field != "mcpServers.db.command" || d.String() != "error: .mcp.json: mcpServers.db.command: must be a string" {
		t.Errorf("diagnostic %+v", d)
	}
}

// Lint names each value the operator must set before a server or hook starts,
// with the command that sets it: a ${VAR} without a default, a required
// userConfig key without one (in a server or a hook). A ${VAR:-default}, an
// optional key and a key with a default need nothing.
func TestLintNamesTheValuesTheOperatorMustSet(t *testing.T) {
	dir := writePlugin(t, map[string]string{
		"plugin.json": `{"name": "vals", "version": "1.0.0",
			"userConfig": {"token": {"type": "string", "title": "T", "description": "d", "required": true, "sensitive": true},
			               "region": {"type": "string", "title": "R", "description": "d", "default": "eu"}, "opt": {"type": "string", "title": "O", "description": "d"}},
			"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "check --token ${user_config.token}"}]}]}}`,
		".mcp.json": `{"mcpServers": {"main": {"command": "python3", "args": ["${CLAUDE_PLUGIN_ROOT}/s.py", "--key", "${SECRET_TOKEN}", "${user_config.region}", "${user_config.opt}"],
			"env": {"LEVEL": "${LEVEL:-basic}", "T": "${user_config.token}", "AGAIN": "${SECRET_TOKEN}"}}}}`,
	})
	_, diags := warningsOf(t, dir)
	var got []string
	for _, d := range diags {
		if strings.Contains(d.Message, " needs ") {
			got = append(got, d.File+": "+d.Field+": "+d.Message)
		}
	}
	want := []string{
		".mcp.json: main.args[2]: server main needs SECRET_TOKEN: oz0-node plugin config vals SECRET_TOKEN=…",
		".mcp.json: main.env.T: server main needs token: oz0-node plugin config vals token=…",
		"plugin.json: command: hook PreToolUse[0] needs token: oz0-node plugin config vals token=…",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lint:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A secret's binding is checked: its hosts are host patterns, and a binding no
// server or hook uses, or one without a reason, is a warning.
func TestSecretBindingsParsedAndLinted(t *testing.T) {
	dir := writePlugin(t, map[string]string{
		"plugin.json": `{"name":"keyed","extensions":{"ai.oz0":{
			"egress":[{"host":"api.example.com","reason":"r"}],
			"secrets":{"API_KEY":{"hosts":["api.example.com:443"],"body":true,"reason":"the API"},"UNUSED":{}}}}}`,
		".mcp.json": `{"s":{"command":"x","env":{"K":"${API_KEY}"}}}`,
	})
	m, diags := warningsOf(t, dir)
	b := m.Secrets["API_KEY"]
	if len(b.Hosts) != 1 || b.Hosts[0] != "api.example.com:443" || !b.Body || b.Reason != "the API" {
		t.Errorf("binding %+v", b)
	}
	for _, f := range []string{`extensions."ai.oz0".secrets.UNUSED`, `extensions."ai.oz0".secrets.UNUSED.reason`} {
		if _, ok := findDiag(diags, f); !ok {
			t.Errorf("no warning for %s in %v", f, diags)
		}
	}
	if _, ok := findDiag(diags, `extensions."ai.oz0".secrets.API_KEY`); ok {
		t.Errorf("warned about a binding a server uses: %v", diags)
	}
}
