package manifest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{
		"Bash":                         {Tool: "Bash"},
		" Bash(git commit:*) ":         {Tool: "Bash", Spec: "git commit:*", HasSpec: true},
		"Edit(src/**/*.ts)":            {Tool: "Edit", Spec: "src/**/*.ts", HasSpec: true},
		"WebFetch(domain:example.com)": {Tool: "WebFetch", Spec: "domain:example.com", HasSpec: true},
		"mcp__github__create_issue":    {Tool: "mcp__github__create_issue"},
		"mcp__github__*":               {Tool: "mcp__github__*"},
		"Bash(echo (a))":               {Tool: "Bash", Spec: "echo (a)", HasSpec: true},
	} {
		got, err := ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Bash(" + strings.Repeat("a", MaxRuleLength) + ")", "Bash(", "Bash()", "Bash(x", "tool_input.command matches 'git push'", "(x)", "Ba sh"} {
		if r, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestRuleMatchesToolCalls(t *testing.T) {
	bash := func(cmd string) map[string]any { return map[string]any{"command": cmd} }
	file := func(p string) map[string]any { return map[string]any{"file_path": p} }
	for _, tc := range []struct {
		rule  string
		tool  string
		input map[string]any
		want  bool
	}{
		{"Bash", "Bash", bash("anything"), true},
		{"Bash", "Edit", file("/x"), false},
		{"Bash(git commit:*)", "Bash", bash("git commit -m 'x'"), true},
		{"Bash(git commit:*)", "Bash", bash("git commit"), true},
		{"Bash(git commit:*)", "Bash", bash("git push"), false},
		{"Bash(git commit:*)", "Bash", bash("git status && git commit -am x"), true},
		{"Bash(git commit:*)", "Bash", bash("GIT_AUTHOR_NAME=x git commit -m y"), true},
		{"Bash(git commit:*)", "Bash", bash("echo git commit"), false},
		{"Bash(git commit:*)", "Edit", file("/x"), false},
		{"Bash(git push *)", "Bash", bash("git push origin main"), true},
		{"Bash(git push *)", "Bash", bash("git push"), true},
		{"Bash(git push *)", "Bash", bash("git pushy"), false},
		{"Bash(ls*)", "Bash", bash("lsof"), true},
		{"Bash(npm run test)", "Bash", bash("npm run test"), true},
		{"Bash(npm run test)", "Bash", bash("npm run test:unit"), false},
		{"Bash(* --force)", "Bash", bash("git push --force"), true},
		{"Bash(rm -rf *)", "Bash", bash("cd /tmp; rm -rf build"), true},
		{"Bash(rm -rf *)", "Bash", bash("ls | grep x"), false},
		// A payload without the field the rule reads: run the hook rather than skip it.
		{"Bash(git commit:*)", "Bash", map[string]any{}, true},
		{"Edit(*.ts)", "Edit", file("/w/src/a.ts"), true},
		{"Edit(*.ts)", "Write", file("/w/src/a.ts"), true},
		{"Edit(*.ts)", "Edit", file("/w/src/a.go"), false},
		{"Edit(src/**)", "Edit", file("/w/src/deep/a.go"), true},
		{"Edit(/src/**/*.ts)", "MultiEdit", file("/w/src/x/a.ts"), true},
		{"Edit(/src/**/*.ts)", "Edit", file("/w/lib/a.ts"), false},
		{"Read(//etc/**)", "Read", file("/etc/passwd"), true},
		{"Read(~/.ssh/*)", "Read", file("/home/u/.ssh/id_ed25519"), true},
		{"Read(.env)", "Read", file("/w/sub/.env"), true},
		{"Read(.env)", "Edit", file("/w/.env"), false},
		{"Edit", "NotebookEdit", map[string]any{"notebook_path": "/n.ipynb"}, true},
		{"WebFetch(domain:example.com)", "WebFetch", map[string]any{"url": "https://docs.example.com/x"}, true},
		{"WebFetch(domain:example.com)", "WebFetch", map[string]any{"url": "https://example.org/x"}, false},
		{"WebFetch(domain:example.com)", "WebFetch", map[string]any{"url": "https://badexample.com/"}, false},
		{"mcp__github", "mcp__github__create_issue", nil, true},
		{"mcp__github", "mcp__githubx__create_issue", nil, false},
		{"mcp__github__*", "mcp__github__list", nil, true},
		{"mcp__github__create_issue", "mcp__github__list", nil, false},
		{"Task(Explore)", "Task", map[string]any{"subagent_type": "Explore"}, true},
		{"Task(Explore)", "Task", map[string]any{"subagent_type": "Plan"}, false},
		{"Skill(pdf)", "Skill", map[string]any{"skill": "pdf"}, true}, // unknown specifier: runs
	} {
		r, err := ParseRule(tc.rule)
		if err != nil {
			t.Fatalf("%s: %v", tc.rule, err)
		}
		if got := r.Matches(tc.tool, tc.input); got != tc.want {
			t.Errorf("%s on %s %v: %v, want %v", tc.rule, tc.tool, tc.input, got, tc.want)
		}
	}
}

func TestMatchToolReadsMatchersAsClaudeCodeDoes(t *testing.T) {
	for _, tc := range []struct {
		matcher, tool string
		want          bool
	}{
		{"", "Bash", true},
		{"*", "mcp__x__y", true},
		{"Bash", "Bash", true},
		{"Bash", "BashOutput", false}, // a plain name is exact
		{"Edit|Write", "Write", true},
		{"Edit, Write", "Write", true},
		{"Edit|Write", "MultiEdit", false},
		{"mcp__.*", "mcp__github__list", true},
		{"Notebook.*", "NotebookEdit", true},
		{"^Read$", "ReadMore", false},
		{"(", "(", false},
	} {
		if got := MatchTool(tc.matcher, tc.tool); got != tc.want {
			t.Errorf("MatchTool(%q, %q) = %v, want %v", tc.matcher, tc.tool, got, tc.want)
		}
	}
}

// A hook with `if` runs only for the calls its rule matches, judged on a payload
// in the shape Claude Code sends on stdin.
func TestHookWithIfNeverRunsUnconditionally(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"guard"}`,
		"hooks/hooks.json": `{"description":"commit guard","hooks":{
			"PreToolUse":[{"matcher":"Bash","hooks":[
				{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/check-commit.sh","if":"Bash(git commit:*)","timeout":30},
				{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/log.sh"}]}],
			"Stop":[{"hooks":[{"type":"command","command":"x","if":"Bash(git push:*)"}]}]}}`,
	}))
	if len(m.Hooks) != 3 || m.Hooks[0].If != "Bash(git commit:*)" {
		t.Fatalf("hooks %+v", m.Hooks)
	}
	payload := func(cmd string) (string, map[string]any) {
		raw := `{"session_id":"abc","transcript_path":"/t.jsonl","cwd":"/w","permission_mode":"default",
			"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":` + jsonString(cmd) + `,"description":"d"},"tool_use_id":"toolu_1"}`
		var p struct {
			ToolName  string         `json:"tool_name"`
			ToolInput map[string]any `json:"tool_input"`
		}
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatal(err)
		}
		return p.ToolName, p.ToolInput
	}
	guard, logger, stop := m.Hooks[0], m.Hooks[1], m.Hooks[2]
	for cmd, want := range map[string]bool{"git commit -m fix": true, "git status": false, "ls && git commit -a": true} {
		tool, in := payload(cmd)
		if got := guard.Applies(tool, in); got != want {
			t.Errorf("guard on %q: %v, want %v", cmd, got, want)
		}
		if !logger.Applies(tool, in) {
			t.Errorf("the hook without if does not apply to %q", cmd)
		}
	}
	if guard.Applies("Edit", map[string]any{"file_path": "/w/a"}) || guard.Applies("", nil) {
		t.Error("the guard applies to another tool or to an event without a tool")
	}
	// Claude Code evaluates if on tool events only: elsewhere the hook never runs.
	if stop.Applies("", nil) || stop.Applies("Bash", map[string]any{"command": "git push"}) {
		t.Error("a Stop hook with if runs")
	}
	if _, ok := findDiag(Warnings(m), "hooks.Stop[0].hooks[0].if"); !ok {
		t.Errorf("no warning about if on Stop: %v", Warnings(m))
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
