package hookrun

import (
	"bytes"
	"encoding/json"
	"fmt"
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

	explicit     bool // said allow in JSON
	context      string
	system       string
	stop         bool
	stopReason   string
	updatedInput json.RawMessage
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
	// PermissionRequest answers with a decision object.
	Decision *struct {
		Behavior string `json:"behavior"`
		Message  string `json:"message"`
	} `json:"decision"`
}

// plainContextEvents add a hook's plain (non-JSON) stdout to the agent's context.
var plainContextEvents = []string{"SessionStart", "UserPromptSubmit", "UserPromptExpansion"}

// Read interprets one hook run for event, as Claude Code does: exit 2 blocks with
// stderr as the reason; stdout is read only on exit 0; any other ending is a
// non-blocking error.
func Read(event string, r Result) Outcome {
	o := Outcome{Plugin: r.Plugin, Hook: r.Hook, Decision: Allow, Duration: r.Duration}
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
	o.system = h.SystemMessage
	if h.Continue != nil && !*h.Continue {
		o.stop, o.stopReason = true, h.StopReason
	}
	switch h.Decision {
	case "block":
		o.Decision, o.Reason = Deny, h.Reason
	case "approve":
		o.explicit, o.Reason = true, h.Reason
	}
	if s := h.HookSpecific; s != nil && (s.HookEventName == "" || s.HookEventName == event) {
		o.context = s.AdditionalContext
		o.updatedInput = s.UpdatedInput
		switch s.PermissionDecision {
		case "deny":
			o.Decision, o.Reason = Deny, s.PermissionDecisionReason
		case "ask":
			if o.Decision != Deny {
				o.Decision, o.Reason = Ask, s.PermissionDecisionReason
			}
		case "allow":
			if o.Decision == Allow {
				o.explicit, o.Reason = true, s.PermissionDecisionReason
			}
		}
		if d := s.Decision; d != nil {
			switch d.Behavior {
			case "deny":
				o.Decision, o.Reason = Deny, d.Message
			case "allow":
				if o.Decision == Allow {
					o.explicit = true
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
// stopReason; updatedInput is passed on only when exactly one hook gives one and
// the call is not denied. Failures and timeouts never block; they are told on
// stderr.
func Merge(event string, rs []Result) Answer {
	var a Answer
	var deny, ask, allow, ctx, sys, stops, notes []string
	var updated []json.RawMessage
	stop := false
	for _, r := range rs {
		o := Read(event, r)
		a.Runs = append(a.Runs, o)
		attributed := "[" + o.Plugin + "] " + o.Reason
		switch o.Decision {
		case Deny:
			deny = append(deny, attributed)
		case Ask:
			ask = append(ask, attributed)
		case Allow:
			if o.explicit && o.Reason != "" {
				allow = append(allow, attributed)
			}
		default:
			notes = append(notes, "oz0: hook "+fmt.Sprint(o.Hook)+" of plugin "+o.Plugin+": "+o.Reason)
		}
		if o.context != "" {
			ctx = append(ctx, o.context)
		}
		if o.system != "" {
			sys = append(sys, "["+o.Plugin+"] "+o.system)
		}
		if o.stop {
			stop = true
			if o.stopReason != "" {
				stops = append(stops, "["+o.Plugin+"] "+o.stopReason)
			}
		}
		if o.updatedInput != nil {
			updated = append(updated, o.updatedInput)
		}
	}
	var reasons []string
	switch {
	case len(deny) > 0:
		a.Decision, reasons = Deny, deny
	case len(ask) > 0:
		a.Decision, reasons = Ask, ask
	default:
		a.Decision, reasons = Allow, allow
	}
	a.Reason = strings.Join(reasons, "\n")
	if len(updated) > 1 {
		notes = append(notes, fmt.Sprintf("oz0: %d hooks changed the tool input; none of the changes is applied", len(updated)))
		updated = nil
	}
	if a.Decision == Deny && !slices.Contains(blockJSONEvents, event) && event != "PreToolUse" && event != "PermissionRequest" {
		// The event takes no JSON decision: exit 2 with the reasons is how it blocks.
		a.Exit, a.Stderr = 2, a.Reason
		return a
	}
	out := map[string]any{}
	if stop {
		out["continue"] = false
		if len(stops) > 0 {
			out["stopReason"] = strings.Join(stops, "\n")
		}
	}
	if len(sys) > 0 {
		out["systemMessage"] = strings.Join(sys, "\n")
	}
	hso := map[string]any{}
	switch event {
	case "PreToolUse":
		if len(deny)+len(ask)+len(allow) > 0 || a.Decision == Allow && len(updated) == 1 {
			hso["permissionDecision"] = a.Decision
			if a.Reason != "" {
				hso["permissionDecisionReason"] = a.Reason
			}
		}
		if len(updated) == 1 && a.Decision != Deny {
			hso["updatedInput"] = updated[0]
		}
	case "PermissionRequest":
		switch a.Decision {
		case Deny:
			hso["decision"] = map[string]any{"behavior": "deny", "message": a.Reason}
		case Allow:
			if len(allow) > 0 || len(updated) == 1 {
				d := map[string]any{"behavior": "allow"}
				if len(updated) == 1 {
					d["updatedInput"] = updated[0]
				}
				hso["decision"] = d
			}
		}
	default:
		if a.Decision == Deny {
			out["decision"] = "block"
			out["reason"] = a.Reason
		}
	}
	if len(ctx) > 0 && slices.Contains(contextEvents, event) {
		hso["additionalContext"] = strings.Join(ctx, "\n")
	}
	if len(hso) > 0 {
		hso["hookEventName"] = event
		out["hookSpecificOutput"] = hso
	}
	if len(out) > 0 {
		b, _ := json.Marshal(out)
		a.Stdout = string(b)
	}
	a.Stderr = strings.Join(notes, "\n")
	return a
}
