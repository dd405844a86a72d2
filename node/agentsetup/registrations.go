package agentsetup

import (
	"regexp"
	"slices"
	"strings"

	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// Registration is one hook entry setup writes: the event Claude Code forwards
// to `oz0-node hook`, and the matcher that narrows which of its occurrences
// ("" for every one).
type Registration struct {
	Event   string `json:"event"`
	Matcher string `json:"matcher,omitempty"`
}

// matcherEvents are the events whose matcher Claude Code compares with a field
// of theirs other than a tool name (hookrun compares the same ones).
var matcherEvents = []string{"SessionStart", "ConfigChange", "SessionEnd", "PreCompact", "PostCompact", "Notification", "SubagentStart", "SubagentStop"}

// nodeTools is how the agent names the node's tools: mcp__oz0__<plugin>__<tool>.
const nodeTools = "mcp__" + hookrun.MCPServer + "__"

// Registrations are the hook entries Claude Code needs so that every hook of
// the installed plugins meets its events, and nothing more: an event no plugin
// handles is not registered, so it costs the agent nothing. Each entry's matcher
// is the union of the names the plugins' matchers list, widened where the node
// matches more names than Claude Code does: a plugin's hook may name one of its
// own tools (or, by the operator's grant, another plugin's) by the plugin's or
// the gateway's name (echo, demo__echo), which the agent calls
// mcp__oz0__demo__echo. A matcher that is a regular expression, or none, makes
// the entry match every occurrence. Claude Code forwarding an occurrence no hook
// wants costs a process; missing one would skip a hook, so every doubt widens.
func Registrations(plugins []hookrun.Plugin, grants []policy.HookGrant) []Registration {
	var out []Registration
	for _, ev := range manifest.HookEvents {
		var names []string
		var prefixes []string // plugins whose tools a hook may name by a short name
		all, any := false, false
		for _, p := range plugins {
			for _, h := range p.Hooks {
				if h.Event != ev {
					continue
				}
				any = true
				tool := slices.Contains(manifest.ToolEvents, ev)
				if !tool && !slices.Contains(matcherEvents, ev) {
					all = true // Claude Code reads no matcher for it
					continue
				}
				ns, plain := manifest.MatcherNames(h.Matcher)
				switch {
				case plain && len(ns) == 0, !plain:
					// A plugin's regular expression never reaches Claude Code's
					// settings: Claude Code would run it against every tool name
					// with an engine that backtracks (an expression like (a+)+$
					// could hold the agent), and one it cannot compile would
					// drop the hook. The event is registered for every tool; the
					// node matches the expression itself.
					all = true
				default:
					names = append(names, ns...)
				}
				if tool {
					prefixes = append(prefixes, p.Name)
					for _, g := range grants {
						if g.Watcher == p.Name {
							prefixes = append(prefixes, g.Other)
						}
					}
				}
			}
		}
		if !any {
			continue
		}
		if all {
			out = append(out, Registration{Event: ev})
			continue
		}
		out = append(out, Registration{Event: ev, Matcher: unionMatcher(names, prefixes, slices.Contains(manifest.ToolEvents, ev))})
	}
	return out
}

// unionMatcher is one Claude Code matcher that selects exactly the names and,
// for tool events, the names the agent gives the prefixes' tools by them: a plain
// name list when it can be one, else an anchored expression of quoted names (no
// backtracking to speak of).
func unionMatcher(names, prefixes []string, tool bool) string {
	slices.Sort(prefixes)
	prefixes = slices.Compact(prefixes)
	var exact []string
	for _, n := range names {
		exact = append(exact, n)
		if tool {
			// The gateway's name (demo__echo) and the plugin's own (echo).
			exact = append(exact, nodeTools+n)
			for _, p := range prefixes {
				exact = append(exact, nodeTools+p+"__"+n)
			}
		}
	}
	slices.Sort(exact)
	exact = slices.Compact(exact)
	// Claude Code reads a list of plain names as names; a name with another
	// character (a plugin's "-") would make the list an expression.
	if _, plain := manifest.MatcherNames(strings.Join(exact, "|")); plain {
		return strings.Join(exact, "|")
	}
	q := make([]string, len(exact))
	for i, n := range exact {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^(?:" + strings.Join(q, "|") + ")$"
}
