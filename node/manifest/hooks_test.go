package manifest

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func hookPlugin(t *testing.T, hooks string) (*Manifest, []Diagnostic) {
	t.Helper()
	return warningsOf(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"hk"}`, "hooks/hooks.json": hooks}))
}

func TestEveryDocumentedHookEventLoads(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"hooks":{`)
	for i, ev := range HookEvents {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + ev + `":[{"hooks":[{"type":"command","command":"true"}]}]`)
	}
	b.WriteString(`}}`)
	m, diags := hookPlugin(t, b.String())
	if len(m.Hooks) != len(HookEvents) || len(diags) != 0 {
		t.Errorf("%d hooks of %d events, warnings %v", len(m.Hooks), len(HookEvents), diags)
	}
	for _, ev := range []string{"PostToolUseFailure", "PermissionRequest", "UserPromptExpansion", "SubagentStart", "PermissionDenied", "PostToolBatch", "StopFailure"} {
		found := false
		for _, h := range m.Hooks {
			found = found || h.Event == ev
		}
		if !found {
			t.Errorf("no hook for %s", ev)
		}
	}
}

func TestUnknownHookEventIsAWarningNeverAnError(t *testing.T) {
	m, diags := hookPlugin(t, `{"hooks":{"postToolUse":[{"hooks":[{"type":"command","command":"a"}]}],
		"OnBoot":[{"hooks":[{"type":"command","command":"b"}]}],
		"Stop":[{"hooks":[{"type":"command","command":"c"}]}]}}`)
	if len(m.Hooks) != 1 || m.Hooks[0].Command != "c" {
		t.Errorf("hooks %+v", m.Hooks)
	}
	if d, ok := findDiag(diags, "hooks.postToolUse"); !ok || !strings.Contains(d.Message, "did you mean PostToolUse?") {
		t.Errorf("diagnostics %v", diags)
	}
	if d, ok := findDiag(diags, "hooks.OnBoot"); !ok || !strings.Contains(d.Message, "unknown hook event") || d.Severity != SevWarning {
		t.Errorf("diagnostics %v", diags)
	}
}

func TestHookTimeoutIsSecondsAnyPositiveNumberCapped(t *testing.T) {
	m, diags := hookPlugin(t, `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[
		{"type":"command","command":"a","timeout":5000},
		{"type":"command","command":"b","timeout":10},
		{"type":"command","command":"c","timeout":0.5},
		{"type":"command","command":"d"},
		{"type":"command","command":"e","timeout":60}]}]}}`)
	want := []struct {
		timeout  time.Duration
		declared float64
	}{{MaxHookTimeout, 5000}, {10 * time.Second, 10}, {500 * time.Millisecond, 0.5}, {DefaultHookTimeout, 0}, {MaxHookTimeout, 60}}
	for i, w := range want {
		if m.Hooks[i].Timeout != w.timeout || m.Hooks[i].DeclaredTimeout != w.declared {
			t.Errorf("hook %d: timeout %v declared %v, want %v %v", i, m.Hooks[i].Timeout, m.Hooks[i].DeclaredTimeout, w.timeout, w.declared)
		}
	}
	d, ok := findDiag(diags, "hooks.PreToolUse[0].hooks[0].timeout")
	if !ok || !strings.Contains(d.Message, "5000 seconds") || !strings.Contains(d.Message, "caps") {
		t.Errorf("diagnostics %v", diags)
	}
	if len(diags) != 1 {
		t.Errorf("only the capped timeout should warn: %v", diags)
	}
}

func TestHookFieldsAreKeptAndTheIgnoredOnesNamed(t *testing.T) {
	m, diags := hookPlugin(t, `{"hooks":{"PostToolUse":[{"matcher":"Edit|Write","hooks":[
		{"type":"command","command":"fmt.sh","if":"Edit(*.go)","async":true,"asyncRewake":true,"rewakeMessage":"m",
		 "shell":"bash","statusMessage":"Formatting…","once":true,"futureField":1}]}]}}`)
	want := Hook{Event: "PostToolUse", Matcher: "Edit|Write", Command: "fmt.sh", Timeout: DefaultHookTimeout,
		If: "Edit(*.go)", Async: true, AsyncRewake: true, Shell: "bash", StatusMessage: "Formatting…", Once: true}
	if len(m.Hooks) != 1 || !reflect.DeepEqual(m.Hooks[0], want) {
		t.Fatalf("hooks %+v", m.Hooks)
	}
	base := "hooks.PostToolUse[0].hooks[0]."
	for field, says := range map[string]string{
		"async": "async is ignored", "asyncRewake": "asyncRewake is ignored", "rewakeMessage": "ignored",
		"shell": "/bin/sh", "statusMessage": "ignored", "once": "not once per session", "futureField": "unknown hook field",
	} {
		if d, ok := findDiag(diags, base+field); !ok || !strings.Contains(d.Message, says) {
			t.Errorf("%s: no warning saying %q in %v", field, says, diags)
		}
	}
	if _, ok := findDiag(diags, base+"if"); ok {
		t.Errorf("if is honoured, yet warned about: %v", diags)
	}
}

func TestOtherHookTypesAreRefusedPerHookAndTheRestLoads(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"mixed"}`,
		".mcp.json":                  `{"srv":{"command":"node","args":["s.js"]}}`,
		"hooks/hooks.json": `{"hooks":{"Stop":[{"hooks":[
			{"type":"prompt","prompt":"Is the task done? $ARGUMENTS","timeout":30},
			{"type":"command","command":"notify.sh"},
			{"type":"agent","prompt":"verify"},
			{"type":"http","url":"https://hooks.example.com/stop"},
			{"type":"mcp_tool","server":"x","tool":"y"},
			{"type":"webhook"}]}],
			"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"g.sh","if":"tool_input.command matches 'git push'"}]}]}}`,
	}))
	if len(m.Servers) != 1 || len(m.Hooks) != 1 || m.Hooks[0].Command != "notify.sh" {
		t.Fatalf("servers %+v hooks %+v", m.Servers, m.Hooks)
	}
	if len(m.RefusedHooks) != 6 {
		t.Fatalf("refused %+v", m.RefusedHooks)
	}
	for i, want := range []struct{ typ, says string }{
		{"command", `if "tool_input.command matches 'git push'"`}, {"prompt", "language model"}, {"agent", "subagent"},
		{"http", "posts the event"}, {"mcp_tool", "another MCP server"}, {"webhook", `unknown hook type "webhook"`},
	} {
		r := m.RefusedHooks[i]
		if r.Type != want.typ || !strings.Contains(r.Reason, want.says) || !strings.HasPrefix(r.Field, "hooks/hooks.json: hooks.") {
			t.Errorf("refused[%d] = %+v, want type %s saying %q", i, r, want.typ, want.says)
		}
	}
	if d, ok := findDiag(diags, "hooks.Stop[0].hooks[0]"); !ok || !strings.Contains(d.Message, "hook not run") {
		t.Errorf("diagnostics %v", diags)
	}
}

func TestHookExecFormKeepsArgsApart(t *testing.T) {
	m, _ := hookPlugin(t, `{"hooks":{"SessionStart":[{"hooks":[
		{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/bin/start","args":["--dir","a b; rm -rf /"]},
		{"type":"command","command":"echo hi"}]}]}}`)
	if got := m.Hooks[0].Argv(); !reflect.DeepEqual(got, []string{"${CLAUDE_PLUGIN_ROOT}/bin/start", "--dir", "a b; rm -rf /"}) {
		t.Errorf("exec form argv %q", got)
	}
	if got := m.Hooks[1].Argv(); !reflect.DeepEqual(got, []string{"/bin/sh", "-c", "echo hi"}) {
		t.Errorf("shell form argv %q", got)
	}
	if e := m.Expand(Vars{Root: "/p"}); e.Hooks[0].Argv()[0] != "/p/bin/start" {
		t.Errorf("expanded %q", e.Hooks[0].Argv())
	}
	got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"a"}`,
		"hooks/hooks.json": `{"Stop":[{"hooks":[{"type":"command","command":"x","args":["${CLAUDE_PLUGIN_ROOT}/../../etc"]}]}]}`}))
	if !strings.Contains(got, "hooks/hooks.json: Stop[0].hooks[0].args[0]: \"${CLAUDE_PLUGIN_ROOT}/../../etc\": leaves the plugin folder") {
		t.Errorf("got %s", got)
	}
}

func TestHooksFromTheDefaultFileAndTheManifestBothLoad(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"two","hooks":["./hooks/hooks.json","./extra/more.json",{"Stop":[{"hooks":[{"type":"command","command":"inline"}]}]}]}`,
		"hooks/hooks.json":           `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"default"}]}]}}`,
		"extra/more.json":            `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"more"}]}]}}`,
	}))
	var cmds []string
	for _, h := range m.Hooks {
		cmds = append(cmds, h.Command)
	}
	if !reflect.DeepEqual(cmds, []string{"default", "more", "inline"}) || m.HooksFile != "hooks/hooks.json" {
		t.Errorf("commands %q from %s", cmds, m.HooksFile)
	}
}

// A hook command is shell text: the node fills in the plugin's folders and its
// userConfig values and leaves the shell's own ${…} alone.
func TestHookCommandsKeepShellSyntax(t *testing.T) {
	m, _ := warningsOf(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"sh","userConfig":{"level":{"type":"string","title":"L","default":"warn"}}}`,
		"hooks/hooks.json": `{"hooks":{"PostToolUse":[{"hooks":[{"type":"command",
			"command":"f=${CLAUDE_PROJECT_DIR:-.}; for x in ${FILES[@]}; do echo ${#x} ${x%.go}; done; ${CLAUDE_PLUGIN_ROOT}/run --level=${user_config.level} --home=${HOME}"}]}]}}`,
	}))
	e, issues := m.ExpandAll(Vars{Root: "/p", Data: "/h"}, nil)
	want := "f=${CLAUDE_PROJECT_DIR:-.}; for x in ${FILES[@]}; do echo ${#x} ${x%.go}; done; /p/run --level=warn --home=${HOME}"
	if len(issues) != 0 || e.Hooks[0].Command != want {
		t.Errorf("command\n %s\nwant\n %s\nissues %+v", e.Hooks[0].Command, want, issues)
	}
}

// A matcher the node cannot read refuses that group's hooks; "*" matches all.
func TestUnreadableMatcherRefusesItsHooksNotThePlugin(t *testing.T) {
	m, diags := hookPlugin(t, `{"hooks":{
		"PreToolUse":[{"matcher":"Write(docs/**)","hooks":[{"type":"command","command":"a"}]},
			{"matcher":"(?<=x)y","hooks":[{"type":"command","command":"b"}]},
			{"matcher":"*","hooks":[{"type":"command","command":"c"}]}],
		"SessionStart":[{"matcher":"*","hooks":[{"type":"command","command":"d"}]}]}}`)
	if len(m.Hooks) != 2 || m.Hooks[0].Command != "c" || !m.Hooks[0].Applies("Bash", nil) || m.Hooks[1].Command != "d" {
		t.Errorf("hooks %+v", m.Hooks)
	}
	if len(m.RefusedHooks) != 2 || !strings.Contains(m.RefusedHooks[0].Reason, `belongs in the hook's "if"`) || !strings.Contains(m.RefusedHooks[1].Reason, "(?<=x)y") {
		t.Errorf("refused %+v", m.RefusedHooks)
	}
	if !hasWarning(diags, "hooks.PreToolUse[0].hooks[0]", "hook not run: matcher") {
		t.Errorf("diagnostics %v", diags)
	}
}
