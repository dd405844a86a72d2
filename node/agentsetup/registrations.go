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
// is the union of the plugins' matchers for the event, widened where the node
// matches more names than Claude Code does: a plugin's hook may name one of its
// own tools (or, by the operator's grant, another plugin's) by the plugin's or
// the gateway's name (echo, demo__echo), which the agent calls
// mcp__oz0__demo__echo. Claude Code forwarding an occurrence no hook wants costs
// a process; missing one would skip a hook, so every doubt widens.
func Registrations(plugins []hookrun.Plugin, grants []policy.HookGrant) []Registration {
	var out []Registration
	for _, ev := range manifest.HookEvents {
		var names, res []string
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
				case plain && len(ns) == 0, !plain && matchesEverything(h.Matcher):
					all = true
				case plain:
					names = append(names, ns...)
				default:
					res = append(res, h.Matcher)
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
		out = append(out, Registration{Event: ev, Matcher: unionMatcher(names, res, prefixes, slices.Contains(manifest.ToolEvents, ev))})
	}
	return out
}

// matchesEverything reports whether a regular-expression matcher selects every
// name: it matches the empty string without anchoring (".*", "a*").
func matchesEverything(re string) bool {
	if strings.ContainsAny(re, "^$") || strings.Contains(re, `\A`) || strings.Contains(re, `\z`) || strings.Contains(re, `\b`) {
		return false
	}
	r, err := regexp.Compile(re)
	return err == nil && r.MatchString("")
}

// unionMatcher is one Claude Code matcher that selects whatever any of the
// names (exact), res (unanchored expressions) or, for tool events, the node's
// names of the prefixes' tools select: a plain name list when it can be one, else
// a regular expression.
func unionMatcher(names, res, prefixes []string, tool bool) string {
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
	if len(res) == 0 {
		// Claude Code reads a list of plain names as names; a name with another
		// character (a plugin's "-") would make the list an expression.
		if _, plain := manifest.MatcherNames(strings.Join(exact, "|")); plain {
			return strings.Join(exact, "|")
		}
	}
	var alts []string
	if len(exact) > 0 {
		q := make([]string, len(exact))
		for i, n := range exact {
			q[i] = regexp.QuoteMeta(n)
		}
		alts = append(alts, "^(?:"+strings.Join(q, "|")+")$")
	}
	slices.Sort(res)
	for _, r := range slices.Compact(res) {
		alts = append(alts, "(?:"+r+")")
	}
	if tool && len(prefixes) > 0 && len(res) > 0 {
		// An expression may select a tool by a name the agent does not call it by.
		q := make([]string, len(prefixes))
		for i, p := range prefixes {
			q[i] = regexp.QuoteMeta(p)
		}
		alts = append(alts, "^"+nodeTools+"(?:"+strings.Join(q, "|")+")__")
	}
	return strings.Join(alts, "|")
}
