package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/policy"
)

// hookRunner runs plugin hooks in their plugin's sandbox: around gateway calls,
// and for the events an agent forwards (`oz0-node hook`, POST /v1/hooks). The
// hooks an event reaches run concurrently, each within its decided timeout (at
// most the node's cap), and their answers merge as Claude Code merges them. A
// tool event goes only to the hooks of the plugin that owns the tool and of
// plugins the operator granted (--plugin-hooks-see), decided again for every
// event; a hook's `if` rule and matcher must match the call.
type hookRunner struct {
	d *Daemon
}

// recentHookRuns is how many hook runs status keeps.
const recentHookRuns = 32

type hookInput struct {
	SessionID string `json:"session_id"`
	Event     string `json:"hook_event_name"`
	Tool      string `json:"tool_name,omitempty"`
	Input     any    `json:"tool_input,omitempty"`
	Response  any    `json:"tool_response,omitempty"`
}

func (h *hookRunner) PreToolUse(ctx context.Context, c gateway.ToolCall) string {
	a := h.gatewayEvent(ctx, c.Plugin, hookInput{SessionID: c.Session, Event: "PreToolUse", Tool: c.Tool, Input: c.Args})
	switch a.Decision {
	case hookrun.Deny:
		return a.Reason
	case hookrun.Ask:
		// No one stands behind a gateway call to confirm it: asking is refusing.
		return "a hook asks for the user's confirmation, which this MCP client cannot give: " + a.Reason
	}
	return ""
}

func (h *hookRunner) PostToolUse(ctx context.Context, c gateway.ToolCall, res *mcp.CallToolResult) string {
	a := h.gatewayEvent(ctx, c.Plugin, hookInput{SessionID: c.Session, Event: "PostToolUse", Tool: c.Tool, Input: c.Args, Response: res})
	if a.Decision == hookrun.Deny {
		return a.Reason
	}
	return ""
}

func (h *hookRunner) Session(ctx context.Context, event, session string) {
	h.gatewayEvent(ctx, "", hookInput{SessionID: session, Event: event})
}

// gatewayEvent runs the hooks of an event of the gateway's own calls. owner is the
// plugin whose tool is called ("" for events without a tool).
func (h *hookRunner) gatewayEvent(ctx context.Context, owner string, in hookInput) hookrun.Answer {
	if !h.AnyHookFor(in.Event) {
		// Most calls meet no hook at all: answer before encoding the payload
		// (and the whole result, for PostToolUse).
		return hookrun.Answer{Decision: hookrun.Allow}
	}
	raw, _ := json.Marshal(in)
	p := &hookrun.Payload{SessionID: in.SessionID, Event: in.Event, Tool: in.Tool, Raw: raw}
	var names []string
	if in.Tool != "" {
		if args, ok := in.Input.(json.RawMessage); ok {
			json.Unmarshal(args, &p.Input)
		}
		// The gateway's name <plugin>__<tool>, the plugin's own, and the agent's.
		bare := strings.TrimPrefix(in.Tool, owner+"__")
		names = []string{"mcp__" + hookrun.MCPServer + "__" + in.Tool, in.Tool, bare}
	}
	// The gateway knows exactly whose tool it calls: owner holds authority over
	// it (and its hooks keep their egress for it); a watcher granted the call
	// does not.
	return h.run(ctx, p, owner, owner, names, "gateway")
}

// AnyHookFor reports whether any installed plugin has a hook for event; run
// still decides which of them see a given call.
func (h *hookRunner) AnyHookFor(event string) bool {
	d := h.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.plugins {
		for _, hk := range p.Manifest.Hooks {
			if hk.Event == event {
				return true
			}
		}
	}
	return false
}

// AgentHook implements api.HookProvider: an agent's forwarded event.
func (d *Daemon) AgentHook(ctx context.Context, payload []byte) (*api.HookAnswer, error) {
	p, err := hookrun.Parse(payload)
	if err != nil {
		return nil, err
	}
	owner, names := hookrun.Owner(p.Tool, func(name string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		_, ok := d.plugins[name]
		return ok
	})
	a, runs := d.hooks.runs(ctx, p, owner, hookrun.Served(p.Tool), names, "agent")
	return &api.HookAnswer{Exit: a.Exit, Stdout: a.Stdout, Stderr: a.Stderr, Decision: a.Decision, Runs: runs}, nil
}

func hookRunOf(p *hookrun.Payload, o hookrun.Outcome, source string) api.HookRun {
	return api.HookRun{
		Time: time.Now().UTC().Format(time.RFC3339Nano), Plugin: o.Plugin, Event: p.Event, Tool: p.Tool,
		Source: source, Decision: o.Decision, Reason: o.Reason, Seconds: o.Duration.Seconds(), Network: o.Network, Dropped: o.Dropped,
	}
}

// run runs every hook p reaches, concurrently, and merges their answers. names
// are the names the tool may be matched by; owner is the plugin whose tool is
// called as far as who may see the call goes ("" for the agent's own tools and
// for events without a tool), own the plugin that serves it exactly (hookrun.Served),
// which alone holds authority over the call and keeps its egress for it.
func (h *hookRunner) run(ctx context.Context, p *hookrun.Payload, owner, own string, names []string, source string) hookrun.Answer {
	a, _ := h.runs(ctx, p, owner, own, names, source)
	return a
}

// runs is run with the status line of each hook run.
func (h *hookRunner) runs(ctx context.Context, p *hookrun.Payload, owner, own string, names []string, source string) (hookrun.Answer, []api.HookRun) {
	d := h.d
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return hookrun.Answer{Decision: hookrun.Allow}, []api.HookRun{} // no new sandboxes while the node stops
	}
	d.hookWG.Add(1)
	defer d.hookWG.Done()
	var plugins []hookrun.Plugin
	for _, name := range sortedKeys(d.plugins) {
		plugins = append(plugins, hookrun.Plugin{Name: name, Hooks: d.plugins[name].Manifest.Hooks})
	}
	runCtx := d.runCtx
	grants := d.cfg.Node.Config.HookGrants
	projectGrants := d.cfg.Node.Config.HookProject
	approved := d.cfg.Node.Config.HookApprove
	d.mu.Unlock()
	if runCtx != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(runCtx, cancel) // the node stopping ends the hook
		defer stop()
	}
	cands := hookrun.Select(plugins, grants, p, owner, names)
	if len(cands) == 0 {
		return hookrun.Answer{Decision: hookrun.Allow}, []api.HookRun{}
	}
	// The session's project, for the plugins the operator granted it to.
	projects := map[string]string{}
	if source == "agent" {
		home, _ := os.UserHomeDir()
		for _, c := range cands {
			pr, err := hookrun.Project(projectGrants, c.Plugin, p.Cwd, d.cfg.Node.Dir.Root, home)
			if err != nil {
				d.log.Warn("hook runs without the project", "plugin", c.Plugin, "err", err)
			}
			projects[c.Plugin] = pr
		}
	}
	results := hookrun.RunAll(ctx, cands, func(ctx context.Context, c hookrun.Candidate) hookrun.Result {
		return h.one(ctx, c.Plugin, c.Index, p.Raw, projects[c.Plugin], own)
	})
	a := hookrun.Merge(p.Event, results, func(plugin string) bool { return policy.HookAuthority(approved, plugin, own) })
	runs := []api.HookRun{}
	for _, o := range a.Runs {
		run := hookRunOf(p, o, source)
		run.Project = projects[o.Plugin]
		runs = append(runs, run)
		d.auditHook(run, p.SessionID)
		d.met.HookRun(o.Plugin, p.Event, o.Decision == hookrun.Deny)
		d.log.Info("hook", "plugin", o.Plugin, "hook", o.Hook, "event", p.Event, "tool", p.Tool, "source", source,
			"decision", o.Decision, "reason", o.Reason, "duration", o.Duration, "network", run.Network, "dropped", o.Dropped)
		if len(o.Dropped) > 0 {
			h.dropped(o, p)
		}
		d.mu.Lock()
		d.hookRuns = append([]api.HookRun{run}, d.hookRuns...)
		if len(d.hookRuns) > recentHookRuns {
			d.hookRuns = d.hookRuns[:recentHookRuns]
		}
		d.mu.Unlock()
		d.publish(api.Event{Type: "hook", Hook: &run})
	}
	d.changed()
	return a, runs
}

// dropped raises, once per plugin, the finding that its hook answered beyond its
// authority; each run's line in status says what was dropped.
func (h *hookRunner) dropped(o hookrun.Outcome, p *hookrun.Payload) {
	d := h.d
	d.mu.Lock()
	_, seen := d.findings[api.CodeHookAnswerDropped+"|"+o.Plugin]
	d.mu.Unlock()
	if seen {
		return
	}
	what := p.Event
	if p.Tool != "" {
		what += " of " + p.Tool
	}
	d.raise(api.Finding{Code: api.CodeHookAnswerDropped, Severity: api.SevWarning, Subject: o.Plugin,
		Message: fmt.Sprintf("a hook of %s answered %s, a tool it does not own, with more authority than it holds; dropped: %s (its deny, ask, block, stop and context are kept)",
			o.Plugin, what, strings.Join(o.Dropped, ", ")),
		Fix: fmt.Sprintf("nothing to do if %s should not decide for you; if you trust it to allow and rewrite every tool call, run the node with %s %s", o.Plugin, policy.HookApproveFlag, o.Plugin)})
}

// one runs hook i of plugin in its sandbox, decided now like every start, for an
// event about a tool that plugin own serves; the result says the network it had.
func (h *hookRunner) one(ctx context.Context, plugin string, i int, input []byte, project, own string) hookrun.Result {
	d := h.d
	log := d.log.With("plugin", plugin, "hook", i)
	fail := func(msg string, err error) hookrun.Result {
		log.Warn("hook not run", "err", err)
		return hookrun.Result{Exit: -1, Err: msg + ": " + err.Error()}
	}
	// Decided now; it runs for its decided time: its manifest's, at most the
	// node's cap (Start.Ctx).
	st, err := d.start.Hook(ctx, plugin, i, own, project)
	if err != nil {
		return fail("not run", err)
	}
	r := hookrun.ExecWith(st.Ctx, st.Proc.Cmd, st.Proc.Start, input)
	r.Network = string(st.Target.Network)
	st.Close()
	if r.TimedOut {
		if _, capped := policy.HookTimeout(st.Plugin.Manifest.Hooks[i]); capped {
			log.Warn("hook stopped at the node's cap; not blocking", "timeout", st.Target.Timeout, "manifest_timeout_seconds", st.Plugin.Manifest.Hooks[i].DeclaredTimeout)
		} else {
			log.Warn("hook timed out; not blocking", "timeout", st.Target.Timeout)
		}
	}
	return r
}
