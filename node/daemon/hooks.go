package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/policy"
)

// hookRunner runs plugin hooks in their plugin's sandbox around gateway calls.
// A hook that exits 2, or prints {"decision":"block"}, blocks the call with its
// reason; one that times out or crashes does not block (and is logged). A tool
// event goes only to the hooks of the plugin that owns the tool, and of plugins
// the operator granted (--plugin-hooks-see), decided again for every call; no hook
// runs longer than the node's cap, whatever its manifest says.
type hookRunner struct {
	d *Daemon
}

type hookInput struct {
	SessionID string `json:"session_id"`
	Event     string `json:"hook_event_name"`
	Tool      string `json:"tool_name,omitempty"`
	Input     any    `json:"tool_input,omitempty"`
	Response  any    `json:"tool_response,omitempty"`
}

func (h *hookRunner) PreToolUse(ctx context.Context, c gateway.ToolCall) string {
	return h.run(ctx, "PreToolUse", c.Plugin, c.Tool, hookInput{SessionID: c.Session, Event: "PreToolUse", Tool: c.Tool, Input: c.Args})
}

func (h *hookRunner) PostToolUse(ctx context.Context, c gateway.ToolCall, res *mcp.CallToolResult) string {
	return h.run(ctx, "PostToolUse", c.Plugin, c.Tool, hookInput{SessionID: c.Session, Event: "PostToolUse", Tool: c.Tool, Input: c.Args, Response: res})
}

func (h *hookRunner) Session(ctx context.Context, event, session string) {
	h.run(ctx, event, "", "", hookInput{SessionID: session, Event: event})
}

// run runs every hook of event whose matcher matches tool, in plugin order, and
// returns the first blocking reason. owner is the plugin whose tool is called
// ("" for the agent's own tools and for events without a tool): a plugin's hooks
// run only where the policy lets them see that call.
func (h *hookRunner) run(ctx context.Context, event, owner, tool string, in hookInput) string {
	d := h.d
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return "" // no new sandboxes while the node stops (SessionEnd of closing callers)
	}
	d.hookWG.Add(1)
	defer d.hookWG.Done()
	names := sortedKeys(d.plugins)
	plugins := d.plugins
	runCtx := d.runCtx
	grants := d.cfg.Node.Config.HookGrants
	d.mu.Unlock()
	if runCtx != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(runCtx, cancel) // the node stopping ends the hook
		defer stop()
	}
	input, _ := json.Marshal(in)
	for _, name := range names {
		if !policy.HookSees(grants, name, owner) {
			continue
		}
		p := plugins[name]
		for i, hk := range p.Manifest.Hooks {
			if hk.Event != event {
				continue
			}
			if tool != "" && hk.Matcher != "" && hk.Matcher != "*" {
				re, err := regexp.Compile(hk.Matcher)
				if err != nil || !re.MatchString(tool) {
					continue
				}
			}
			reason := h.one(ctx, name, i, input)
			d.met.HookRun(name, event, reason != "")
			if reason != "" {
				return reason
			}
		}
	}
	return ""
}

func (h *hookRunner) one(ctx context.Context, plugin string, i int, input []byte) string {
	d := h.d
	log := d.log.With("plugin", plugin, "hook", i)
	// Re-plan: the hook's sandbox is decided now, like every start.
	p, err := d.cfg.Node.One(plugin)
	if err != nil {
		log.Error("hook not run", "err", err)
		return ""
	}
	spec, t, err := p.HookSpec(i)
	if err != nil {
		log.Warn("hook not run", "err", err)
		return ""
	}
	if err := p.EnsureHome(); err != nil {
		log.Error("hook not run", "err", err)
		return ""
	}
	if d.cfg.Prepare != nil && t.Action == policy.Sandboxed && t.User.PerPlugin {
		if err := d.cfg.Prepare(p); err != nil {
			log.Error("hook not run", "err", err)
			return ""
		}
	}
	be, ok := d.cfg.Backends[spec.Backend]
	if !ok {
		log.Error("hook not run: backend unavailable", "backend", spec.Backend)
		return ""
	}
	d.attachEgress(spec)
	// The policy decided the hook's time: its manifest's, at most the node's cap.
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = policy.HookTimeoutCap
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	proc, err := be.Command(hctx, spec)
	if err != nil {
		log.Error("hook not run", "err", err)
		return ""
	}
	var stdout, stderr bytes.Buffer
	proc.Cmd.Stdin = bytes.NewReader(input)
	proc.Cmd.Stdout = &limited{w: &stdout, n: 64 << 10}
	proc.Cmd.Stderr = &limited{w: &stderr, n: 64 << 10}
	proc.Cmd.WaitDelay = time.Second
	err = proc.Cmd.Run()
	if proc.Cleanup != nil {
		proc.Cleanup()
	}
	if hctx.Err() != nil {
		if asked := p.Manifest.Hooks[i].Timeout; asked > timeout {
			log.Warn("hook stopped at the node's cap; not blocking", "timeout", timeout, "manifest_timeout", asked)
		} else {
			log.Warn("hook timed out; not blocking", "timeout", timeout)
		}
		return ""
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() == 2 {
			reason := strings.TrimSpace(stderr.String())
			if reason == "" {
				reason = "hook " + plugin + " exited 2"
			}
			return reason
		}
		log.Warn("hook failed; not blocking", "exit", ee.ExitCode(), "stderr", strings.TrimSpace(stderr.String()))
		return ""
	}
	if err != nil {
		log.Warn("hook failed; not blocking", "err", err)
		return ""
	}
	var out struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	if json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out) == nil && out.Decision == "block" {
		if out.Reason == "" {
			out.Reason = "blocked by a hook of " + plugin
		}
		return out.Reason
	}
	return ""
}

// limited keeps at most n bytes of a hook's output.
type limited struct {
	w interface{ Write([]byte) (int, error) }
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
