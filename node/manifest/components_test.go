package manifest

import (
	"reflect"
	"strings"
	"testing"
)

func TestPartsTheNodeDoesNotRunAreListed(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"full","displayName":"Full Plugin","commands":["./commands/a.md"],"agents":"./agents/",
			"outputStyles":"./styles/","lspServers":{"go":{"command":"gopls","extensionToLanguage":{".go":"go"}}},
			"monitors":"./monitors.json","channels":[{"server":"s"}],"keywords":["x"],"$schema":"https://example.com/s.json","madeUp":1}`,
		"skills/pdf/SKILL.md": "---\nname: pdf\n---\n",
		".mcp.json":           `{"s":{"command":"x"}}`,
	}))
	if m.DisplayName != "Full Plugin" {
		t.Errorf("display name %q", m.DisplayName)
	}
	want := []Component{
		{Kind: "commands", Source: ".claude-plugin/plugin.json: commands"},
		{Kind: "agents", Source: ".claude-plugin/plugin.json: agents"},
		{Kind: "skills", Source: "skills/"},
		{Kind: "outputStyles", Source: ".claude-plugin/plugin.json: outputStyles"},
		{Kind: "lspServers", Source: ".claude-plugin/plugin.json: lspServers"},
		{Kind: "monitors", Source: ".claude-plugin/plugin.json: monitors"},
		{Kind: "channels", Source: ".claude-plugin/plugin.json: channels"},
	}
	if !reflect.DeepEqual(m.NotRun, want) {
		t.Errorf("not run\n %+v\nwant\n %+v", m.NotRun, want)
	}
	if m.RunsNothing() || m.NotRunSummary() != "commands, agents, skills, outputStyles, lspServers, monitors, channels" {
		t.Errorf("summary %q", m.NotRunSummary())
	}
	if d, ok := findDiag(diags, "madeUp"); !ok || !strings.Contains(d.Message, "unknown manifest field") {
		t.Errorf("diagnostics %v", diags)
	}
	for _, f := range []string{"keywords", "$schema", "displayName"} {
		if _, ok := findDiag(diags, f); ok {
			t.Errorf("%s warned about: %v", f, diags)
		}
	}
}

func TestAPluginOfOnlySkillsSaysSo(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"just-skills","description":"skills"}`,
		"skills/review/SKILL.md":     "---\nname: review\n---\n",
		".lsp.json":                  `{"go":{"command":"gopls"}}`,
	}))
	if !m.RunsNothing() || !reflect.DeepEqual(m.NotRun, []Component{{Kind: "skills", Source: "skills/"}, {Kind: "lspServers", Source: ".lsp.json"}}) {
		t.Fatalf("not run %+v", m.NotRun)
	}
	if d, ok := findDiag(diags, ""); !ok || !strings.Contains(d.Message, "made only of skills, lspServers") || !strings.Contains(d.Message, "runs nothing") {
		t.Errorf("diagnostics %v", diags)
	}
	got := loadErr(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"x","skills":7}`}))
	if !strings.Contains(got, "skills: must be a path, a list or an object") {
		t.Errorf("got %s", got)
	}
}
