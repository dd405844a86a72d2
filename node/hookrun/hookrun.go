// Package hookrun decides which plugin hooks an agent's event reaches and merges
// their answers into one, in Claude Code's hook protocol (a payload on stdin; an
// exit code, stderr and stdout JSON back). Selecting and merging are pure; running
// a hook is the caller's (the node's or `oz0-node hook`'s), in its plugin's sandbox.
package hookrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// MCPServer is the name under which `oz0-node setup` registers the node's MCP
// entry with an agent: the agent calls the node's tools as
// mcp__<MCPServer>__<plugin>__<tool>.
const MCPServer = "oz0"

// mcpPrefix starts the agent's name of a tool the node serves.
const mcpPrefix = "mcp__" + MCPServer + "__"

// MaxPayload bounds the payload an agent may send (tool responses can be large).
const MaxPayload = 8 << 20

// MaxOutput bounds what is kept of each of a hook's stdout and stderr.
const MaxOutput = 64 << 10

// Payload is a hook payload in Claude Code's shape: the fields the node reads. Raw
// is what every hook receives, unchanged.
type Payload struct {
	SessionID string         `json:"session_id"`
	Cwd       string         `json:"cwd"`
	Event     string         `json:"hook_event_name"`
	Tool      string         `json:"tool_name"`
	Input     map[string]any `json:"tool_input"`
	// Fields some events' matchers compare (see matcherField).
	Source           string `json:"source"`
	Reason           string `json:"reason"`
	Trigger          string `json:"trigger"`
	NotificationType string `json:"notification_type"`
	AgentType        string `json:"agent_type"`

	Raw []byte `json:"-"`
}

// Parse reads a payload. It must be one JSON object naming its event.
func Parse(b []byte) (*Payload, error) {
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("hook payload: %w", err)
	}
	if dec.More() {
		return nil, errors.New("hook payload: more than one JSON value")
	}
	if p.Event == "" {
		return nil, errors.New("hook payload: no hook_event_name")
	}
	if !slices.Contains(manifest.HookEvents, p.Event) {
		return nil, fmt.Errorf("hook payload: unknown event %q", p.Event)
	}
	p.Raw = bytes.TrimSpace(b)
	return &p, nil
}

// Owner says whose tool an agent's tool name is: the plugin for a tool the node
// serves, "" for the agent's own tools and other MCP servers' (no plugin wrote
// them). The node's tools are mcp__oz0__<plugin>__<tool> as setup registers the
// node; a client that registered it under another name calls them
// mcp__<name>__<plugin>__<tool>, so such a name whose <plugin> is installed is
// that plugin's too (a misread can only narrow who sees a call, never widen it).
// names are the names a matcher may select the tool by: the agent's name and, for
// the node's tools, the gateway's (<plugin>__<tool>) and the plugin's own (<tool>).
func Owner(tool string, installed func(name string) bool) (owner string, names []string) {
	rest, ok := strings.CutPrefix(tool, mcpPrefix)
	if !ok {
		if r, ok := strings.CutPrefix(tool, "mcp__"); ok && installed != nil {
			if _, inner, ok := strings.Cut(r, "__"); ok {
				if plugin, bare, ok := strings.Cut(inner, "__"); ok && plugin != "" && installed(plugin) {
					return plugin, []string{tool, inner, bare}
				}
			}
		}
		return "", []string{tool}
	}
	plugin, bare, ok := strings.Cut(rest, "__")
	if !ok || plugin == "" {
		// Not a name the gateway serves; it still belongs to no one but the node, so
		// no plugin's hooks see it unless one is named exactly that.
		return rest, []string{tool}
	}
	return plugin, []string{tool, rest, bare}
}

// Served is the plugin that serves an agent's tool when the tool's name is in
// exactly the form setup registers the node under (mcp__oz0__<plugin>__<tool>),
// and "" for any other name. A plugin's hooks hold authority over a call, and keep
// their egress for it, only when Served names that plugin (policy.HookAuthority,
// policy.HookRun): a name under another MCP server is never a plugin's own, even
// where Owner takes it as one to narrow who sees it.
func Served(tool string) string {
	rest, ok := strings.CutPrefix(tool, mcpPrefix)
	if !ok {
		return ""
	}
	plugin, _, ok := strings.Cut(rest, "__")
	if !ok {
		return ""
	}
	return plugin
}

// Plugin is one installed plugin's hooks, as Select needs them.
type Plugin struct {
	Name  string
	Hooks []manifest.Hook
}

// Candidate is one hook an event reaches.
type Candidate struct {
	Plugin string
	Index  int // the hook's index in its manifest
	Hook   manifest.Hook
}

// matcherField names, per event without a tool, the payload field its matcher is
// compared with (as Claude Code does); events not named here ignore matchers.
func matcherField(p *Payload) (string, bool) {
	switch p.Event {
	case "SessionStart", "ConfigChange":
		return p.Source, true
	case "SessionEnd":
		return p.Reason, true
	case "PreCompact", "PostCompact":
		return p.Trigger, true
	case "Notification":
		return p.NotificationType, true
	case "SubagentStart", "SubagentStop":
		return p.AgentType, true
	}
	return "", false
}

// Select lists, in plugin order then manifest order, the hooks that p reaches:
// the plugin's hooks must be allowed to see the call (a plugin sees the agent's own
// tools and its own; another plugin's only by the operator's grant), name the
// event, and match the tool (matcher and if rule) or, for other events, the
// event's matcher field.
func Select(plugins []Plugin, grants []policy.HookGrant, p *Payload, owner string, names []string) []Candidate {
	var out []Candidate
	tool := slices.Contains(manifest.ToolEvents, p.Event) && p.Tool != ""
	for _, pl := range plugins {
		if !policy.HookSees(grants, pl.Name, owner) {
			continue
		}
		for i, h := range pl.Hooks {
			if h.Event != p.Event || !reaches(h, p, tool, names) {
				continue
			}
			out = append(out, Candidate{Plugin: pl.Name, Index: i, Hook: h})
		}
	}
	return out
}

func reaches(h manifest.Hook, p *Payload, tool bool, names []string) bool {
	if tool {
		for _, n := range names {
			if h.Applies(n, p.Input) {
				return true
			}
		}
		return false
	}
	if !h.Applies("", nil) {
		return false // an if rule never runs outside tool events
	}
	if v, ok := matcherField(p); ok {
		return manifest.MatchTool(h.Matcher, v)
	}
	return true
}

// Result is what one hook did.
type Result struct {
	Plugin   string
	Hook     int
	Exit     int // the exit code; -1 when it did not run to an exit
	Stdout   []byte
	Stderr   []byte
	TimedOut bool
	// Err says why the hook did not run or ended without an exit code.
	Err      string
	Duration time.Duration
	// Network is the network the run had (policy.Network; "" when it did not run).
	Network string
}

// RunAll runs every candidate concurrently with one and returns the results in
// candidate order.
func RunAll(ctx context.Context, cands []Candidate, one func(context.Context, Candidate) Result) []Result {
	out := make([]Result, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Go(func() {
			start := time.Now()
			r := one(ctx, c)
			r.Plugin, r.Hook = c.Plugin, c.Index
			if r.Duration == 0 {
				r.Duration = time.Since(start)
			}
			out[i] = r
		})
	}
	wg.Wait()
	return out
}

// Exec runs a prepared hook command (its context carries the hook's timeout) with
// input on stdin and collects what it did. timedOut reports whether that context
// ended it.
func Exec(ctx context.Context, cmd *exec.Cmd, input []byte) Result {
	return ExecWith(ctx, cmd, cmd.Start, input)
}

// ExecWith is Exec with the command started by start (a sandbox.Process's Start,
// which a backend may make cheaper than cmd.Start), then waited for.
func ExecWith(ctx context.Context, cmd *exec.Cmd, start func() error, input []byte) Result {
	var stdout, stderr bytes.Buffer
	cmd.Stdin = bytes.NewReader(input)
	cmd.Stdout = &limited{w: &stdout, n: MaxOutput}
	cmd.Stderr = &limited{w: &stderr, n: MaxOutput}
	cmd.WaitDelay = time.Second
	began := time.Now()
	err := start()
	if err == nil {
		err = cmd.Wait()
	}
	r := Result{Exit: -1, Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Duration: time.Since(began)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.TimedOut = true
		r.Err = "timed out"
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
		if r.Exit < 0 {
			r.Err = ee.Error() // killed by a signal
		}
	case err != nil:
		r.Err = err.Error()
	default:
		r.Exit = 0
	}
	return r
}

// limited keeps at most n bytes of a hook's output and discards the rest.
type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
