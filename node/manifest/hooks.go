package manifest

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"oz0.ai/node/internal/lazyre"
)

// Hook is one command hook, with every field Claude Code defines for it. Fields
// the node does not act on are kept so that nothing a plugin wrote is dropped
// silently: Load adds a notice for each of them.
type Hook struct {
	Event   string `json:"event"`
	Matcher string `json:"matcher,omitempty"`
	Command string `json:"command"`
	// Args, when set, is the exec form: Command is the program and Args its
	// arguments, with no shell in between (see Argv).
	Args []string `json:"args,omitempty"`
	// Timeout is what the node waits for: the hook's own timeout, capped at
	// MaxHookTimeout, or DefaultHookTimeout.
	Timeout time.Duration `json:"timeout"`
	// DeclaredTimeout is the timeout as written, in seconds (0 if none).
	DeclaredTimeout float64 `json:"declared_timeout,omitempty"`
	// If is a permission rule ("Bash(git commit:*)"): the hook runs only for tool
	// calls it matches. Applies honours it; a hook with If never runs unconditionally.
	If            string `json:"if,omitempty"`
	Async         bool   `json:"async,omitempty"`
	AsyncRewake   bool   `json:"async_rewake,omitempty"`
	Shell         string `json:"shell,omitempty"`
	StatusMessage string `json:"status_message,omitempty"`
	Once          bool   `json:"once,omitempty"`
}

// Argv is the command line of the hook: the exec form when Args is set, else the
// command through /bin/sh -c (hooks are shell commands by definition).
func (h *Hook) Argv() []string {
	if h.Args != nil {
		return append([]string{h.Command}, h.Args...)
	}
	return []string{"/bin/sh", "-c", h.Command}
}

// Applies reports whether the hook runs for a call of tool with input (the
// payload's tool_name and tool_input): its matcher and its If rule must both
// match. For events without a tool, tool is "" and only hooks without an If run
// (Claude Code evaluates If on tool events only; elsewhere such a hook never runs);
// the matcher of such an event (a session source, a notification type) is the
// caller's to compare.
func (h *Hook) Applies(tool string, input map[string]any) bool {
	if h.If != "" {
		if !slices.Contains(ToolEvents, h.Event) || tool == "" {
			return false
		}
		r, err := ParseRule(h.If)
		if err != nil || !r.Matches(tool, input) {
			return false
		}
	}
	if tool == "" {
		return true
	}
	return MatchTool(h.Matcher, tool)
}

// RefusedHook is a hook the node does not run, and why.
type RefusedHook struct {
	Event   string `json:"event"`
	Matcher string `json:"matcher,omitempty"`
	Type    string `json:"type"`
	// Field locates it: "hooks/hooks.json: hooks.Stop[0].hooks[1]".
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// DefaultHookTimeout applies when a hook names none.
const DefaultHookTimeout = 60 * time.Second

// MaxHookTimeout caps any timeout a hook declares (Claude Code accepts any
// number of seconds; a stalled hook must not hold a tool call for long). It is the
// node's one cap on hook time: the policy applies this value.
const MaxHookTimeout = 60 * time.Second

// HookEvents are the events Claude Code documents (hooks reference, 2.1.x). A hook
// naming another event loads with a warning and never fires.
var HookEvents = []string{
	"SessionStart", "SessionEnd", "Setup", "InstructionsLoaded",
	"UserPromptSubmit", "UserPromptExpansion",
	"PreToolUse", "PostToolUse", "PostToolUseFailure", "PostToolBatch",
	"PermissionRequest", "PermissionDenied",
	"Notification", "Stop", "StopFailure", "SubagentStart", "SubagentStop",
	"TaskCreated", "TaskCompleted", "TeammateIdle",
	"PreCompact", "PostCompact", "PreModelSwitch", "PostModelSwitch",
	"Elicitation", "ElicitationResult", "ConfigChange", "CwdChanged", "FileChanged",
	"DirectoryAdded", "WorktreeCreate", "WorktreeRemove", "MessageDisplay",
}

// ToolEvents are the events that concern one tool call; only they evaluate If.
var ToolEvents = []string{"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"}

// hookTypeReasons say why each non-command hook type is refused.
var hookTypeReasons = map[string]string{
	"http":     "an http hook posts the event to a URL from the agent's host; the node runs command hooks only, in the plugin's sandbox",
	"prompt":   "a prompt hook asks a language model; the node has no model to ask",
	"agent":    "an agent hook starts a subagent; the node has no agent to start",
	"mcp_tool": "an mcp_tool hook calls a tool of another MCP server; the node runs command hooks only",
}

// ignoredHookFields are command-hook fields the node reads and does not act on,
// with what that means for the plugin.
var ignoredHookFields = map[string]string{
	"async":           "the node waits for every hook; async is ignored",
	"asyncRewake":     "the node has no background hooks to wake the agent; asyncRewake is ignored",
	"rewakeMessage":   "asyncRewake is not supported; rewakeMessage is ignored",
	"rewakeSummary":   "asyncRewake is not supported; rewakeSummary is ignored",
	"shell":           "the node runs hook commands with /bin/sh; shell is ignored",
	"statusMessage":   "the node shows no spinner; statusMessage is ignored",
	"once":            "the node runs the hook on every event, not once per session; once is ignored",
	"continueOnBlock": "continueOnBlock is ignored",
	"onFailure":       "onFailure is ignored; a failing hook never blocks",
}

// loadHooks reads hooks/hooks.json (always, as Claude Code does) and whatever the
// manifest's hooks field adds: an object, a path, or an array of both.
func (l *loader) loadHooks(top map[string]any) {
	type source struct {
		file string
		obj  map[string]any
	}
	var srcs []source
	seen := map[string]bool{}
	addFile := func(field, p string) {
		rel, ok := relInside(p)
		if !ok {
			l.c.add(l.m.File, field, "%q: must be a path inside the plugin folder", p)
			return
		}
		if !seen[rel] {
			seen[rel] = true
			srcs = append(srcs, source{file: rel})
		}
	}
	if _, err := fs.Lstat(l.fsys, "hooks/hooks.json"); err == nil {
		addFile("", "hooks/hooks.json")
	} else if !isNotExist(err) {
		l.c.add("hooks/hooks.json", "", "%v", readErr(err))
	}
	if v, ok := top["hooks"]; ok {
		items, isList := v.([]any)
		if !isList {
			items = []any{v}
		}
		for i, it := range items {
			field := "hooks"
			if isList {
				field = fmt.Sprintf("hooks[%d]", i)
			}
			switch t := it.(type) {
			case map[string]any:
				srcs = append(srcs, source{file: l.m.File, obj: t})
			case string:
				addFile(field, t)
			default:
				l.c.add(l.m.File, field, "must be an object or a path")
			}
		}
	}
	for _, s := range srcs {
		if l.m.HooksFile == "" {
			l.m.HooksFile = s.file
		}
		obj, base := s.obj, "hooks."
		if obj == nil {
			b, err := readFile(l.fsys, s.file)
			if err != nil {
				l.c.add(s.file, "", "%v", err)
				continue
			}
			o, ok := decodeObject(l.c, s.file, b)
			if !ok {
				continue
			}
			obj, base = o, ""
			if inner, ok := o["hooks"]; ok {
				m, ok := inner.(map[string]any)
				if !ok {
					l.c.add(s.file, "hooks", "must be an object of events")
					continue
				}
				obj, base = m, "hooks."
			}
		}
		l.hookEvents(s.file, base, obj)
	}
}

func (l *loader) hookEvents(file, base string, obj map[string]any) {
	events := make([]string, 0, len(obj))
	for e := range obj {
		events = append(events, e)
	}
	sort.Strings(events)
	w := walker{c: l.c, file: file}
	for _, ev := range events {
		field := base + ev
		groups, ok := obj[ev].([]any)
		if !ok {
			l.c.add(file, field, "must be an array of matcher groups")
			continue
		}
		if !slices.Contains(HookEvents, ev) {
			msg := "unknown hook event: its hooks never fire"
			for _, k := range HookEvents {
				if strings.EqualFold(k, ev) {
					msg += fmt.Sprintf(" (did you mean %s?)", k)
				}
			}
			l.notice(file, field, "%s", msg)
			continue
		}
		for gi, g := range groups {
			gf := fmt.Sprintf("%s[%d]", field, gi)
			gm, ok := g.(map[string]any)
			if !ok {
				l.c.add(file, gf, "must be an object")
				continue
			}
			matcher := w.strAt(gm, gf, "matcher", false)
			// A matcher the node cannot read refuses the group's hooks, not the plugin.
			unreadable := ""
			if matcher != "" && matcher != "*" && !plainMatcherRE.MatchString(matcher) {
				if _, err := regexp.Compile(matcher); err != nil {
					unreadable = fmt.Sprintf("matcher %q is not a regular expression the node can read (%v)", matcher, err)
					if _, err := ParseRule(matcher); err == nil && strings.Contains(matcher, "(") {
						unreadable += "; it reads like a permission rule, which belongs in the hook's \"if\""
					}
				}
			}
			list, ok := gm["hooks"].([]any)
			if !ok {
				l.c.add(file, gf+".hooks", "must be an array of hooks")
				continue
			}
			for hi, h := range list {
				l.hook(file, fmt.Sprintf("%s.hooks[%d]", gf, hi), ev, matcher, unreadable, h)
			}
		}
	}
}

func (l *loader) hook(file, hf, ev, matcher, unreadable string, v any) {
	w := walker{c: l.c, file: file}
	hm, ok := v.(map[string]any)
	if !ok {
		l.c.add(file, hf, "must be an object")
		return
	}
	typ := w.strAt(hm, hf, "type", true)
	if typ == "" {
		return
	}
	refuse := func(reason string) {
		l.m.RefusedHooks = append(l.m.RefusedHooks, RefusedHook{Event: ev, Matcher: matcher, Type: typ, Field: file + ": " + hf, Reason: reason})
		l.notice(file, hf, "hook not run: %s", reason)
	}
	if unreadable != "" {
		refuse(unreadable)
		return
	}
	if typ != "command" {
		reason, ok := hookTypeReasons[typ]
		if !ok {
			reason = fmt.Sprintf("unknown hook type %q; the node runs command hooks only", typ)
		}
		refuse(reason)
		return
	}
	hk := Hook{Event: ev, Matcher: matcher, Command: w.strAt(hm, hf, "command", true), Timeout: DefaultHookTimeout}
	l.hookRefsIn(file, hf+".command", hk.Command)
	checkEscape(l.c, file, hf+".command", hk.Command)
	if av, ok := hm["args"]; ok {
		hk.Args = w.strings(av, hf+".args")
		if hk.Args == nil {
			hk.Args = []string{}
		}
		for i, a := range hk.Args {
			l.hookRefsIn(file, fmt.Sprintf("%s.args[%d]", hf, i), a)
			checkEscape(l.c, file, fmt.Sprintf("%s.args[%d]", hf, i), a)
		}
	}
	if tv, ok := hm["timeout"]; ok {
		n, isNum := tv.(json.Number)
		secs, err := n.Float64()
		switch {
		case !isNum || err != nil || math.IsInf(secs, 0) || math.IsNaN(secs) || secs <= 0:
			l.c.add(file, hf+".timeout", "must be a positive number of seconds")
		default:
			hk.DeclaredTimeout = secs
			if secs >= MaxHookTimeout.Seconds() {
				hk.Timeout = MaxHookTimeout
				if secs > MaxHookTimeout.Seconds() {
					l.notice(file, hf+".timeout", "%s seconds (timeout is in seconds, as Claude Code reads it); the node caps hook timeouts at %d seconds", n, int(MaxHookTimeout/time.Second))
				}
			} else {
				hk.Timeout = time.Duration(secs * float64(time.Second))
			}
		}
	}
	boolField := func(key string) bool {
		v, ok := hm[key]
		if !ok {
			return false
		}
		b, ok := v.(bool)
		if !ok {
			w.typeErr(hf+"."+key, "true or false")
		}
		return b
	}
	hk.Async = boolField("async")
	hk.AsyncRewake = boolField("asyncRewake")
	hk.Once = boolField("once")
	hk.Shell = w.strAt(hm, hf, "shell", false)
	hk.StatusMessage = w.strAt(hm, hf, "statusMessage", false)
	hk.If = w.strAt(hm, hf, "if", false)
	if _, ok := hm["if"]; ok {
		if _, err := ParseRule(hk.If); err != nil {
			// Never run it unconditionally instead.
			refuse(fmt.Sprintf("if %q: %v", hk.If, err))
			return
		}
		if !slices.Contains(ToolEvents, ev) {
			l.notice(file, hf+".if", "Claude Code evaluates if on tool events only (%s); on %s this hook never runs", strings.Join(ToolEvents, ", "), ev)
		}
	}
	known := []string{"type", "command", "args", "timeout", "if"}
	keys := make([]string, 0, len(hm))
	for k := range hm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msg, ok := ignoredHookFields[k]; ok {
			l.notice(file, hf+"."+k, "%s", msg)
		} else if !slices.Contains(known, k) {
			l.notice(file, hf+"."+k, "unknown hook field; ignored")
		}
	}
	l.m.Hooks = append(l.m.Hooks, hk)
}

// plainMatcherRE is a matcher Claude Code compares as a name or a "|" list rather
// than as a regular expression.
var plainMatcherRE = lazyre.New(`^[A-Za-z0-9_| ,]*$`)

// MatchTool reports whether a hook group's matcher selects tool, as Claude Code
// reads matchers: "", "*" or none match every tool; a matcher of letters, digits,
// '_', ' ', ',' and '|' is an exact name or a list of names; anything else is an
// unanchored regular expression.
func MatchTool(matcher, tool string) bool {
	if matcher == "" || matcher == "*" {
		return true
	}
	if plainMatcherRE.MatchString(matcher) {
		for _, alt := range strings.FieldsFunc(matcher, func(r rune) bool { return r == '|' || r == ',' }) {
			if strings.TrimSpace(alt) == tool {
				return true
			}
		}
		return false
	}
	re, err := regexp.Compile(matcher)
	return err == nil && re.MatchString(tool)
}
