package manifest

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
)

// hasWarning reports whether a warning on field (any field when "") says says.
func hasWarning(diags []Diagnostic, field, says string) bool {
	for _, d := range diags {
		if (field == "" || d.Field == field) && strings.Contains(d.Message, says) {
			return true
		}
	}
	return false
}

// corpusChecks says, per corpus fixture (one shape of published Claude Code
// plugins each), what lint and the parsed manifest must show.
var corpusChecks = map[string]func(t *testing.T, m *Manifest, diags []Diagnostic){
	"cc-remote-http": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		s := m.Server("docs-search")
		if s == nil || s.Remote == nil || s.Remote.Type != RemoteHTTP || s.Remote.Host() != "mcp.example.com" || s.Remote.Headers["X-Api-Key"] != "${DOCS_API_KEY:-}" {
			t.Fatalf("server %+v", s)
		}
		if m.Author != "Fixture Author <author@example.com>" {
			t.Errorf("author %q", m.Author)
		}
		// ${DOCS_API_KEY:-} has a default (empty): the server needs no value to start.
		if _, issues := m.ExpandAll(Vars{}, nil); len(issues) != 0 {
			t.Errorf("issues %+v", issues)
		}
		if !hasWarning(diags, "", `"docs-search" is remote (http, mcp.example.com)`) {
			t.Errorf("diagnostics %v", diags)
		}
	},
	"cc-remote-sse": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if s := m.Server("tickets"); s == nil || s.Remote == nil || s.Remote.Type != RemoteSSE || m.ServersFile != ".claude-plugin/plugin.json" {
			t.Fatalf("servers %+v from %s", m.Servers, m.ServersFile)
		}
	},
	"cc-user-config": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if got := m.UserConfigKeys(); !reflect.DeepEqual(got, []string{"api_endpoint", "api_token", "max_results"}) {
			t.Fatalf("keys %v", got)
		}
		if o := m.UserConfig["api_token"]; !o.Sensitive || !o.NeedsValue() {
			t.Errorf("api_token %+v", o)
		}
		_, issues := m.ExpandAll(Vars{Root: "/p", Data: "/h"}, nil)
		var names []string
		for _, i := range issues {
			names = append(names, i.Server+":"+i.Field+":"+i.Name)
		}
		if want := []string{"hosted:headers.Authorization:user_config.api_token", "local:env.SERVICE_TOKEN:user_config.api_token"}; !reflect.DeepEqual(names, want) {
			t.Errorf("unresolved %v, want %v", names, want)
		}
		e, issues := m.ExpandAll(Vars{Root: "/p", Data: "/h"}, func(n string) (string, bool) { return "t0k", n == "user_config.api_token" })
		if len(issues) != 0 || e.Server("hosted").Remote.URL != "https://api.example.com/mcp" || e.Server("local").Args[len(e.Server("local").Args)-1] != "20" {
			t.Errorf("expanded %+v %+v, issues %+v", e.Server("hosted").Remote, e.Server("local").Args, issues)
		}
	},
	"cc-hooks-current": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		events := map[string]Hook{}
		for _, h := range m.Hooks {
			events[h.Event] = h
		}
		for _, ev := range []string{"SessionStart", "PreToolUse", "PostToolUseFailure", "UserPromptExpansion", "PermissionRequest", "SubagentStart", "Stop"} {
			if _, ok := events[ev]; !ok {
				t.Errorf("no %s hook in %+v", ev, m.Hooks)
			}
		}
		if h := events["SessionStart"]; h.Timeout != MaxHookTimeout || h.DeclaredTimeout != 5000 || h.StatusMessage != "Loading context" {
			t.Errorf("SessionStart %+v", h)
		}
		guard := events["PreToolUse"]
		if guard.If != "Bash(git commit:*)" || guard.Applies("Bash", map[string]any{"command": "git status"}) || !guard.Applies("Bash", map[string]any{"command": "git commit -m x"}) {
			t.Errorf("PreToolUse %+v", guard)
		}
		if !events["Stop"].AsyncRewake || !hasWarning(diags, "hooks.Stop[0].hooks[0].asyncRewake", "ignored") || !hasWarning(diags, "hooks.SessionStart[0].hooks[0].timeout", "caps") {
			t.Errorf("diagnostics %v", diags)
		}
	},
	"cc-hook-types": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if len(m.Hooks) != 1 || m.Hooks[0].Command != "${CLAUDE_PLUGIN_ROOT}/done.sh" {
			t.Errorf("hooks %+v", m.Hooks)
		}
		var types []string
		for _, r := range m.RefusedHooks {
			types = append(types, r.Type)
		}
		sort.Strings(types)
		if !reflect.DeepEqual(types, []string{"agent", "http", "mcp_tool", "prompt"}) || !hasWarning(diags, "", "hook not run") {
			t.Errorf("refused %+v", m.RefusedHooks)
		}
	},
	"cc-both-manifests": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if m.Name != "cc-both-manifests" || m.Layout != "claude-code" || !hasWarning(diags, "", "plugin.json is ignored") {
			t.Errorf("manifest %s %s, diagnostics %v", m.Name, m.Layout, diags)
		}
	},
	"cc-server-names": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		var names []string
		for _, s := range m.Servers {
			names = append(names, s.Name+"="+s.DisplayName())
		}
		if !reflect.DeepEqual(names, []string{"Code_Search=Code Search", "Issues_EU=Issues (EU)"}) || !hasWarning(diags, "", `"Code Search" is called "Code_Search"`) {
			t.Errorf("servers %v, diagnostics %v", names, diags)
		}
	},
	"cc-skills-only": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if !m.RunsNothing() || m.NotRunSummary() != "commands, skills" || !hasWarning(diags, "", "made only of commands, skills") {
			t.Errorf("not run %+v, diagnostics %v", m.NotRun, diags)
		}
	},
	"cc-all-components": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if m.DisplayName != "All Components" || m.NotRunSummary() != "commands, agents, skills, outputStyles, lspServers, monitors" {
			t.Errorf("display name %q, not run %q", m.DisplayName, m.NotRunSummary())
		}
		if len(m.Servers) != 1 || m.Servers[0].Cwd != "${CLAUDE_PLUGIN_ROOT}" || len(m.Hooks) != 1 || m.Hooks[0].Timeout != MaxHookTimeout {
			t.Errorf("servers %+v hooks %+v", m.Servers, m.Hooks)
		}
		if !hasWarning(diags, "", "also has commands, agents") {
			t.Errorf("diagnostics %v", diags)
		}
	},
	"cc-paths": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if len(m.Hooks) != 1 || m.Hooks[0].Timeout != 10*time.Second || m.HooksFile != "hooks/hooks.json" || m.ServersFile != "config/mcp.json" || m.Server("files") == nil {
			t.Errorf("hooks %+v from %s, servers %+v from %s", m.Hooks, m.HooksFile, m.Servers, m.ServersFile)
		}
	},
	"cc-unknown-event": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if len(m.Hooks) != 1 || m.Hooks[0].Event != "SessionEnd" || !hasWarning(diags, "hooks.postToolUse", "did you mean PostToolUse?") ||
			!hasWarning(diags, "hooks.SessionEnd[0].hooks[0].continueOnBlock", "ignored") {
			t.Errorf("hooks %+v, diagnostics %v", m.Hooks, diags)
		}
	},
	"cc-launchers": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		b, st := m.Server("browser"), m.Server("status")
		if b == nil || b.Command != "npx" || st == nil || st.Remote == nil || st.Remote.Type != RemoteHTTP || !hasWarning(diags, "status.type", `read as type "http"`) {
			t.Errorf("servers %+v, diagnostics %v", m.Servers, diags)
		}
		if _, issues := m.ExpandAll(Vars{}, nil); len(issues) != 1 || issues[0].Name != "BROWSER_TOKEN" {
			t.Errorf("issues %+v", issues)
		}
	},
	"cc-mcpb-bundle": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if len(m.Bundles) != 1 || m.Bundles[0].Source != "https://downloads.example.com/tool-1.2.0.mcpb" || len(m.Servers) != 0 {
			t.Errorf("bundles %+v servers %+v", m.Bundles, m.Servers)
		}
		if len(diags) != 1 || !strings.Contains(diags[0].Message, "the node fetches it at install") {
			t.Errorf("lint %v", diags)
		}
	},
	"cc-remote-egress": func(t *testing.T, m *Manifest, diags []Diagnostic) {
		if s := m.Server("search"); s == nil || s.Remote == nil || len(m.Egress) != 1 || m.Egress[0].Host != s.Remote.Host() {
			t.Errorf("servers %+v egress %+v", m.Servers, m.Egress)
		}
	},
}

func TestCorpusShapesLintAndParse(t *testing.T) {
	if len(fixtures.Corpus()) < 12 {
		t.Fatalf("only %d corpus fixtures", len(fixtures.Corpus()))
	}
	for _, name := range fixtures.Corpus() {
		t.Run(name, func(t *testing.T) {
			dir := extract(t, name)
			if want := fixtures.Expect(name); want != "" {
				m, diags := Lint(dir, Options{})
				if m != nil || len(diags) == 0 || diags[0].Severity != SevError || !strings.Contains(diags[0].String(), "error: "+want) {
					t.Errorf("lint %v, want an error %q", diags, want)
				}
				return
			}
			check, ok := corpusChecks[name]
			if !ok {
				t.Fatalf("corpus fixture %s has no check", name)
			}
			m, diags := warningsOf(t, dir)
			if m.Name != name {
				t.Errorf("name %q, want the folder name", m.Name)
			}
			check(t, m, diags)
		})
	}
	for name := range corpusChecks {
		if _, err := fixtures.Extract(name, t.TempDir()); err != nil {
			t.Errorf("check for a missing fixture: %v", err)
		}
	}
}
