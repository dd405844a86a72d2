package hookrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Decisions of one hook run, and of a merged answer, as status shows them.
const (
	Allow   = "allow"   // went on without objection (or said allow)
	Ask     = "ask"     // asked for the user's confirmation
	Deny    = "deny"    // blocked: exit 2, decision "block" or permissionDecision "deny"
	Failed  = "error"   // crashed, failed to start, or exited other than 0 or 2: not blocking
	Timeout = "timeout" // killed at its timeout: not blocking
	Garbage = "invalid-output"
)

// Outcome is one hook run as Claude Code reads it.
type Outcome struct {
	Plugin   string        `json:"plugin"`
	Hook     int           `json:"hook"`
	Decision string        `json:"decision"`
	Reason   string        `json:"reason,omitempty"`
	Duration time.Duration `json:"duration"`
	Network  string        `json:"network,omitempty"`

	// Dropped names each part of the hook's answer that widened what the agent
	// may do while its plugin holds no authority over the event
	// (policy.HookAuthority): it was not passed on (docs/promises.md §15).
	Dropped []string `json:"dropped,omitempty"`

	explicit           bool // said allow in JSON
	context            string
	system             string
	stop               bool
	stopReason         string
	interrupt          bool // a PermissionRequest deny that also stops the agent
	updatedInput       json.RawMessage
	updatedPermissions json.RawMessage
	updatedToolOutput  json.RawMessage
}

// hookOutput is the JSON a hook may print on exit 0.
type hookOutput struct {
	Continue       *bool         `json:"continue"`
	StopReason     string        `json:"stopReason"`
	SystemMessage  string        `json:"systemMessage"`
	Decision       string        `json:"decision"`
	Reason         string        `json:"reason"`
	HookSpecific   *hookSpecific `json:"hookSpecificOutput"`
	SuppressOutput bool          `json:"suppressOutput"`
}

type hookSpecific struct {
	HookEventName            string          `json:"hookEventName"`
	PermissionDecision       string          `json:"permissionDecision"`
	PermissionDecisionReason string          `json:"permissionDecisionReason"`
	UpdatedInput             json.RawMessage `json:"updatedInput"`
	AdditionalContext        string          `json:"additionalContext"`
	// PostToolUse of an MCP tool may replace the tool's output.
	UpdatedMCPToolOutput json.RawMessage `json:"updatedMCPToolOutput"`
	// PermissionRequest answers with a decision object.
	Decision *struct {
		Behavior           string          `json:"behavior"`
		Message            string          `json:"message"`
		Interrupt          bool            `json:"interrupt"`
		UpdatedInput       json.RawMessage `json:"updatedInput"`
		UpdatedPermissions json.RawMessage `json:"updatedPermissions"`
	} `json:"decision"`
}

// Narrowing is what a hook may answer for an event its plugin holds no authority
// over (policy.HookAuthority): each field that can only take something away from
// the agent, with the values that do. It is an allowlist: a field not named here
// — today's allow, updatedInput, updatedPermissions, updatedMCPToolOutput, and
// whatever the hook protocol adds later — is dropped and reported.
var narrowing = map[string]func(v json.RawMessage) bool{
	"continue":           isFalse, // true is the default: it asks for nothing
	"stopReason":         anyValue,
	"systemMessage":      anyValue,
	"suppressOutput":     anyValue,
	"decision":           isString("block"),
	"reason":             anyValue,
	"hookSpecificOutput": anyValue, // its fields are checked by narrowingSpecific
}

var narrowingSpecific = map[string]func(v json.RawMessage) bool{
	"hookEventName":            anyValue,
	"permissionDecision":       isString("deny", "ask"),
	"permissionDecisionReason": anyValue,
	"additionalContext":        anyValue,
	"decision":                 anyValue, // PermissionRequest: checked by narrowingPermission
}

var narrowingPermission = map[string]func(v json.RawMessage) bool{
	"behavior":  isString("deny"),
	"message":   anyValue,
	"interrupt": anyValue,
}

// maxDropped bounds how many dropped parts of one answer are named.
const maxDropped = 16

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func anyValue(json.RawMessage) bool { return true }

func isFalse(v json.RawMessage) bool { return string(v) == "false" }

func isString(allowed ...string) func(json.RawMessage) bool {
	return func(v json.RawMessage) bool {
		var s string
		return json.Unmarshal(v, &s) == nil && slices.Contains(allowed, s)
	}
}

// widening lists, in a stable order, the parts of a hook's JSON answer that are
// not on the narrowing allowlist, as "field" or "field value".
func widening(out []byte, event string) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(out, &top) != nil {
		return nil
	}
	var dropped []string
	check := func(prefix string, m map[string]json.RawMessage, allow map[string]func(json.RawMessage) bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			if ok, known := allow[k]; known && ok(v) {
				continue
			}
			if string(v) == "null" || k == "continue" && string(v) == "true" {
				continue // asks for nothing
			}
			if len(dropped) >= maxDropped {
				if dropped[len(dropped)-1] != "…" {
					dropped = append(dropped, "…")
				}
				return
			}
			// The names are the plugin's: kept short (status and the TUI make them
			// safe to print).
			item := prefix + truncate(k, 64)
			if len(v) > 0 && v[0] == '"' && len(v) <= 40 {
				item += " " + string(v)
			}
			dropped = append(dropped, item)
		}
	}
	check("", top, narrowing)
	var hso map[string]json.RawMessage
	if json.Unmarshal(top["hookSpecificOutput"], &hso) != nil {
		return dropped
	}
	if name, ok := hso["hookEventName"]; ok && !isString(event)(name) {
		return dropped // another event's answer: ignored whole
	}
	check("hookSpecificOutput.", hso, narrowingSpecific)
	var dec map[string]json.RawMessage
	if json.Unmarshal(hso["decision"], &dec) == nil {
		check("hookSpecificOutput.decision.", dec, narrowingPermission)
	}
	return dropped
}

// plainContextEvents add a hook's plain (non-JSON) stdout to the agent's context.
var plainContextEvents = []string{"SessionStart", "UserPromptSubmit", "UserPromptExpansion"}

// Read interprets one hook run for event, as Claude Code does: exit 2 blocks with
// stderr as the reason; stdout is read only on exit 0; any other ending is a
// non-blocking error. authority is whether the hook's plugin holds authority over
// the event (policy.HookAuthority); without it, every part of the answer that
// would widen what the agent may do is dropped and named in Dropped.
func Read(event string, r Result, authority bool) Outcome {
	o := Outcome{Plugin: r.Plugin, Hook: r.Hook, Decision: Allow, Duration: r.Duration, Network: r.Network}
	stderr := strings.TrimSpace(string(r.Stderr))
	switch {
	case r.TimedOut:
		o.Decision, o.Reason = Timeout, "timed out; not blocking"
		return o
	case r.Err != "":
		o.Decision, o.Reason = Failed, r.Err+"; not blocking"
		return o
	case r.Exit == 2:
		o.Decision, o.Reason = Deny, stderr
		if o.Reason == "" {
			o.Reason = "exited 2"
		}
		return o
	case r.Exit != 0:
		o.Decision, o.Reason = Failed, fmt.Sprintf("exited %d; not blocking", r.Exit)
		if stderr != "" {
			o.Reason += ": " + firstLine(stderr)
		}
		return o
	}
	out := bytes.TrimSpace(r.Stdout)
	if len(out) == 0 {
		return o
	}
	var h hookOutput
	if out[0] != '{' || json.Unmarshal(out, &h) != nil {
		if slices.Contains(plainContextEvents, event) {
			o.context = string(out)
			return o
		}
		o.Decision, o.Reason = Garbage, "stdout is not the hook JSON; ignored"
		return o
	}
	if !authority {
		o.Dropped = widening(out, event)
	}
	o.system = h.SystemMessage
	if h.Continue != nil && !*h.Continue {
		o.stop, o.stopReason = true, h.StopReason
	}
	switch h.Decision {
	case "block":
		o.Decision, o.Reason = Deny, h.Reason
	case "approve":
		o.explicit, o.Reason = authority, h.Reason
	}
	if s := h.HookSpecific; s != nil && (s.HookEventName == "" || s.HookEventName == event) {
		o.context = s.AdditionalContext
		if authority {
			o.updatedInput = s.UpdatedInput
			o.updatedToolOutput = s.UpdatedMCPToolOutput
		}
		switch s.PermissionDecision {
		case "deny":
			o.Decision, o.Reason = Deny, s.PermissionDecisionReason
		case "ask":
			if o.Decision != Deny {
				o.Decision, o.Reason = Ask, s.PermissionDecisionReason
			}
		case "allow":
			if o.Decision == Allow && authority {
				o.explicit, o.Reason = true, s.PermissionDecisionReason
			}
		}
		if d := s.Decision; d != nil {
			switch d.Behavior {
			case "deny":
				o.Decision, o.Reason, o.interrupt = Deny, d.Message, d.Interrupt
			case "allow":
				if o.Decision == Allow && authority {
					o.explicit = true
					o.updatedInput, o.updatedPermissions = d.UpdatedInput, d.UpdatedPermissions
				}
			}
		}
	}
	if o.Decision == Deny && o.Reason == "" {
		o.Reason = "blocked"
	}
	if len(o.updatedInput) > 0 && (string(o.updatedInput) == "null" || o.updatedInput[0] != '{') {
		o.updatedInput = nil
	}
	if string(o.updatedPermissions) == "null" {
		o.updatedPermissions = nil
	}
	if string(o.updatedToolOutput) == "null" {
		o.updatedToolOutput = nil
	}
	return o
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// Answer is the merged answer to the agent: what `oz0-node hook` exits with and
// prints.
type Answer struct {
	Exit   int    `json:"exit"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Decision is the merged decision (deny, ask, allow) and Reason its reasons,
	// each attributed to its plugin.
	Decision string    `json:"decision"`
	Reason   string    `json:"reason,omitempty"`
	Runs     []Outcome `json:"runs"`
}

// contextEvents take hookSpecificOutput.additionalContext.
var contextEvents = []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "SubagentStart", "Setup", "UserPromptExpansion"}

// blockJSONEvents take a top-level decision "block" with a reason.
var blockJSONEvents = []string{"UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "ConfigChange", "PostToolBatch"}

// Merge merges the runs of one event's hooks the way Claude Code merges hooks of
// one event: a deny (exit 2, decision "block", permissionDecision "deny") wins over
// ask, ask over allow; reasons are joined, each attributed to its plugin;
// additionalContext is concatenated; any continue:false stops the agent, with every
// stopReason; updatedInput (and a PermissionRequest's updatedPermissions, a
// PostToolUse's updatedMCPToolOutput) is passed on only when exactly one hook
// gives one and the call is not denied. Failures and timeouts never block; they
// are told on stderr.
//
// authority says, per plugin, whether its hooks hold authority over this event
// (policy.HookAuthority; nil: none does). What a hook without it answers beyond
// narrowing is dropped, told on stderr and named in its run's Dropped
// (docs/promises.md §15). The running node, `oz0-node hook` by itself and the
// gateway's own hook firing all merge here.
func Merge(event string, rs []Result, authority func(plugin string) bool) Answer {
	var a Answer
	g := &gathered{}
	for _, r := range rs {
		o := Read(event, r, authority != nil && authority(r.Plugin))
		a.Runs = append(a.Runs, o)
		g.add(o)
	}
	var reasons []string
	switch {
	case len(g.deny) > 0:
		a.Decision, reasons = Deny, g.deny
	case len(g.ask) > 0:
		a.Decision, reasons = Ask, g.ask
	default:
		a.Decision, reasons = Allow, g.allow
	}
	a.Reason = strings.Join(reasons, "\n")
	if len(g.updated) > 1 {
		g.notes = append(g.notes, fmt.Sprintf("oz0: %d hooks changed the tool input; none of the changes is applied", len(g.updated)))
		g.updated = nil
	}
	if a.Decision == Deny && !slices.Contains(blockJSONEvents, event) && event != "PreToolUse" && event != "PermissionRequest" {
		// The event takes no JSON decision: exit 2 with the reasons is how it blocks.
		a.Exit, a.Stderr = 2, a.Reason
		return a
	}
	if out := g.render(event, a); len(out) > 0 {
		b, _ := json.Marshal(out)
		a.Stdout = string(b)
	}
	a.Stderr = strings.Join(g.notes, "\n")
	return a
}

// gathered is what the runs of one event's hooks said, as Merge collects it.
type gathered struct {
	deny, ask, allow, ctx, sys, stops, notes []string
	updated, perms, outputs                  []json.RawMessage
	stop, interrupt, explicitAllow           bool
}

// add takes in one hook run's reading.
func (g *gathered) add(o Outcome) {
	if len(o.Dropped) > 0 {
		g.notes = append(g.notes, fmt.Sprintf("oz0: hook %d of plugin %s answered beyond its authority (it may only deny, ask, block, stop or add context here); dropped: %s",
			o.Hook, o.Plugin, strings.Join(o.Dropped, ", ")))
	}
	g.interrupt = g.interrupt || o.interrupt
	if o.updatedPermissions != nil {
		g.perms = append(g.perms, o.updatedPermissions)
	}
	if o.updatedToolOutput != nil {
		g.outputs = append(g.outputs, o.updatedToolOutput)
	}
	attributed := "[" + o.Plugin + "] " + o.Reason
	switch o.Decision {
	case Deny:
		g.deny = append(g.deny, attributed)
	case Ask:
		g.ask = append(g.ask, attributed)
	case Allow:
		g.explicitAllow = g.explicitAllow || o.explicit
		if o.explicit && o.Reason != "" {
			g.allow = append(g.allow, attributed)
		}
	default:
		g.notes = append(g.notes, "oz0: hook "+fmt.Sprint(o.Hook)+" of plugin "+o.Plugin+": "+o.Reason)
	}
	if o.context != "" {
		g.ctx = append(g.ctx, o.context)
	}
	if o.system != "" {
		g.sys = append(g.sys, "["+o.Plugin+"] "+o.system)
	}
	if o.stop {
		g.stop = true
		if o.stopReason != "" {
			g.stops = append(g.stops, "["+o.Plugin+"] "+o.stopReason)
		}
	}
	if o.updatedInput != nil {
		g.updated = append(g.updated, o.updatedInput)
	}
}

// render is the merged answer's JSON for event, decided as a says.
func (g *gathered) render(event string, a Answer) map[string]any {
	out := map[string]any{}
	if g.stop {
		out["continue"] = false
		if len(g.stops) > 0 {
			out["stopReason"] = strings.Join(g.stops, "\n")
		}
	}
	if len(g.sys) > 0 {
		out["systemMessage"] = strings.Join(g.sys, "\n")
	}
	hso := map[string]any{}
	block := func() {
		if a.Decision == Deny {
			out["decision"] = "block"
			out["reason"] = a.Reason
		}
	}
	switch event {
	case "PreToolUse":
		if len(g.deny)+len(g.ask) > 0 || a.Decision == Allow && (g.explicitAllow || len(g.updated) == 1) {
			hso["permissionDecision"] = a.Decision
			if a.Reason != "" {
				hso["permissionDecisionReason"] = a.Reason
			}
		}
		if len(g.updated) == 1 && a.Decision != Deny {
			hso["updatedInput"] = g.updated[0]
		}
	case "PermissionRequest":
		if d := g.permissionDecision(a); d != nil {
			hso["decision"] = d
		}
	case "PostToolUse":
		block()
		if a.Decision != Deny && len(g.outputs) == 1 {
			hso["updatedMCPToolOutput"] = g.outputs[0]
		}
	default:
		block()
	}
	if len(g.ctx) > 0 && slices.Contains(contextEvents, event) {
		hso["additionalContext"] = strings.Join(g.ctx, "\n")
	}
	if len(hso) > 0 {
		hso["hookEventName"] = event
		out["hookSpecificOutput"] = hso
	}
	return out
}

// permissionDecision is a PermissionRequest's decision object, nil for none.
func (g *gathered) permissionDecision(a Answer) map[string]any {
	switch {
	case a.Decision == Deny:
		d := map[string]any{"behavior": "deny", "message": a.Reason}
		if g.interrupt {
			d["interrupt"] = true
		}
		return d
	case a.Decision == Allow && (g.explicitAllow || len(g.updated) == 1):
		d := map[string]any{"behavior": "allow"}
		if len(g.updated) == 1 {
			d["updatedInput"] = g.updated[0]
		}
		if len(g.perms) == 1 {
			d["updatedPermissions"] = g.perms[0]
		}
		return d
	}
	return nil
}
