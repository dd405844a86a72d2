package agentsetup

import (
	"reflect"
	"regexp"
	"testing"

	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

func hooks(hs ...manifest.Hook) []manifest.Hook { return hs }

func hook(event, matcher string) manifest.Hook {
	return manifest.Hook{Event: event, Matcher: matcher, Command: "x"}
}

// Setup registers only the events some installed plugin handles, each with the
// union of their matchers, widened to the names under which the agent calls the
// tools a plugin's hook may name by a shorter one.
func TestRegistrations(t *testing.T) {
	for _, c := range []struct {
		name    string
		plugins []hookrun.Plugin
		grants  []policy.HookGrant
		want    []Registration
	}{
		{"no plugins", nil, nil, nil},
		{"no hooks", []hookrun.Plugin{{Name: "demo"}}, nil, nil},
		{"events without matchers", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("Stop", ""), hook("UserPromptSubmit", "ignored"))}}, nil,
			[]Registration{{Event: "UserPromptSubmit"}, {Event: "Stop"}}},
		{"a session source", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("SessionStart", "startup"))}, {Name: "b", Hooks: hooks(hook("SessionStart", "resume|clear"))}}, nil,
			[]Registration{{Event: "SessionStart", Matcher: "clear|resume|startup"}}},
		{"one plugin matches all", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("PreToolUse", "Bash"))}, {Name: "b", Hooks: hooks(hook("PreToolUse", ".*"))}}, nil,
			[]Registration{{Event: "PreToolUse"}}},
		{"star", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("PostToolUse", "*"))}}, nil, []Registration{{Event: "PostToolUse"}}},
		{"names widen to the plugin's own tools", []hookrun.Plugin{{Name: "guard", Hooks: hooks(hook("PreToolUse", "Bash, echo"))}}, nil,
			[]Registration{{Event: "PreToolUse", Matcher: "Bash|echo|mcp__oz0__Bash|mcp__oz0__echo|mcp__oz0__guard__Bash|mcp__oz0__guard__echo"}}},
		{"a granted plugin's tools too", []hookrun.Plugin{{Name: "audit", Hooks: hooks(hook("PostToolUse", "echo"))}}, []policy.HookGrant{{Watcher: "audit", Other: "demo"}, {Watcher: "x", Other: "y"}},
			[]Registration{{Event: "PostToolUse", Matcher: "echo|mcp__oz0__audit__echo|mcp__oz0__demo__echo|mcp__oz0__echo"}}},
		{"a dash makes an expression", []hookrun.Plugin{{Name: "hook-spy", Hooks: hooks(hook("PreToolUse", "Bash"))}}, nil,
			[]Registration{{Event: "PreToolUse", Matcher: `^(?:Bash|mcp__oz0__Bash|mcp__oz0__hook-spy__Bash)$`}}},
		{"an expression matches every tool", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("PreToolUse", "^Edit$"), hook("PreToolUse", "Write"))}}, nil,
			[]Registration{{Event: "PreToolUse"}}},
		{"an expression matches every source", []hookrun.Plugin{{Name: "a", Hooks: hooks(hook("SessionStart", "start.*"))}}, nil,
			[]Registration{{Event: "SessionStart"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Registrations(c.plugins, c.grants); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// Whatever the node's hook selection would run for a call, Claude Code's
// matcher forwards: for each hook and each name of a tool the plugin may see, the
// registration's matcher (read as Claude Code reads it) selects the agent's name
// of the tool whenever the hook's matcher selects one of the node's names.
func TestRegistrationsForwardEveryCallAHookWants(t *testing.T) {
	matchers := []string{"", "*", ".*", "Bash", "Edit|Write", "echo", "demo__echo", "mcp__oz0__demo__echo", "mcp__.*", "^echo$", "^Bash$|^Read$", "ech", "Notebook.*", "e.h.", "(?i)ECHO"}
	tools := []string{"Bash", "Edit", "Write", "Read", "NotebookEdit", "WebFetch", "mcp__github__create_issue", "mcp__oz0__demo__echo", "mcp__oz0__demo__add", "mcp__oz0__guard__echo", "mcp__oz0__guard__Bash"}
	grants := []policy.HookGrant{{Watcher: "guard", Other: "demo"}}
	installed := func(n string) bool { return n == "demo" || n == "guard" }
	for _, m := range matchers {
		plugins := []hookrun.Plugin{{Name: "guard", Hooks: hooks(hook("PreToolUse", m))}}
		regs := Registrations(plugins, grants)
		for _, tool := range tools {
			owner, names := hookrun.Owner(tool, installed)
			p := &hookrun.Payload{Event: "PreToolUse", Tool: tool}
			wanted := len(hookrun.Select(plugins, grants, p, owner, names)) > 0
			if !wanted {
				continue
			}
			if len(regs) != 1 || !claudeCodeMatches(regs[0].Matcher, tool) {
				t.Errorf("matcher %q: the node would run the hook for %s, but the registration %+v does not forward it", m, tool, regs)
			}
		}
	}
}

// claudeCodeMatches reads a matcher as Claude Code does (the node's MatchTool
// mirrors it).
func claudeCodeMatches(matcher, tool string) bool {
	if _, err := regexp.Compile(matcher); err != nil {
		return false
	}
	return manifest.MatchTool(matcher, tool)
}

// A plugin's matcher never reaches Claude Code's settings as an expression of its
// own: Claude Code runs matchers with a backtracking engine on every tool name, so
// a plugin shipping (a+)+$ could hold the agent, and one Claude Code cannot
// compile would drop the hook. Only names, quoted, narrow an entry.
func TestRegistrationsCarryNoPluginExpression(t *testing.T) {
	for _, m := range []string{`(a+)+$`, `(?P<x>Bash)`, `Bash|(x*)*y`, `[`, `Bash\b`} {
		regs := Registrations([]hookrun.Plugin{{Name: "evil", Hooks: hooks(hook("PreToolUse", m), hook("PreToolUse", "Read"), hook("Notification", m))}}, nil)
		for _, r := range regs {
			if r.Matcher != "" {
				t.Errorf("matcher %q: registered %+v; want the event for every occurrence", m, r)
			}
		}
	}
	regs := Registrations([]hookrun.Plugin{{Name: "a.b", Hooks: hooks(hook("PreToolUse", "Bash"))}}, nil)
	if len(regs) != 1 || regs[0].Matcher != `^(?:Bash|mcp__oz0__Bash|mcp__oz0__a\.b__Bash)$` {
		t.Errorf("a name with an expression's character is quoted: %+v", regs)
	}
}
