package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// hookDeadline is the longest `oz0-node hook` takes: every hook runs at most the
// node's cap and they run side by side, so the answer comes well within Claude
// Code's own limit for a command hook (the timeout setup writes).
const hookDeadline = policy.HookTimeoutCap + 15*time.Second

func newHookCmd(g *globals) *cobra.Command {
	var backend string
	var hooksSee, hooksProject []string
	c := &cobra.Command{
		Use:   "hook",
		Short: "Run the plugins' hooks for one Claude Code hook event (payload on stdin)",
		Long: `Reads one Claude Code hook payload on stdin, runs the hooks of the installed plugins
that the event reaches (matcher and "if" rule; a plugin sees the agent's own tools and
its own mcp__oz0__<plugin>__* calls, another plugin's only by --plugin-hooks-see), each
in its plugin's sandbox, side by side, and answers as a Claude Code hook does: exit 2
or JSON on stdout, the most restrictive answer winning.

A running node runs them (sharing its proxy and supervision, listed in its status);
without one, oz0-node hook runs them itself in a strict node's sandboxes. Written
into Claude Code's settings by: oz0-node setup claude-code`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A signal ends the hooks' sandboxes and cleans them up (their runsc
			// state, the namespace mount) before the command ends.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			return runHook(ctx, g, backend, hooksSee, hooksProject, os.Stdin, os.Stdout, os.Stderr)
		},
	}
	c.Flags().StringVar(&backend, "backend", "auto", "without a running node: sandbox backend auto, bwrap, gvisor, landlock, seatbelt or none")
	c.Flags().StringArrayVar(&hooksSee, "plugin-hooks-see", nil,
		"without a running node: let WATCHER's hooks see OTHER's tool calls: WATCHER=OTHER (a running node uses its own)")
	c.Flags().StringArrayVar(&hooksProject, "plugin-hooks-project", nil,
		"without a running node: let PLUGIN's hooks read the session's project (its cwd) read-only (a running node uses its own)")
	return c
}

// runHook answers one hook event. A failure of its own is a non-blocking error
// (exit 1), as Claude Code reads any exit code but 0 and 2.
func runHook(ctx context.Context, g *globals, backend string, hooksSee, hooksProject []string, in io.Reader, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, hookDeadline)
	defer cancel()
	payload, err := io.ReadAll(io.LimitReader(in, hookrun.MaxPayload+1))
	if err != nil {
		return fmt.Errorf("hook: read the payload: %w", err)
	}
	if len(payload) > hookrun.MaxPayload {
		return fmt.Errorf("hook: payload larger than %d bytes", hookrun.MaxPayload)
	}
	p, err := hookrun.Parse(payload)
	if err != nil {
		return err
	}
	d, err := g.dir()
	if err != nil {
		return err
	}
	var a *api.HookAnswer
	if nodeRunning(d) {
		a, err = api.NewClient(d.Control()).Hook(ctx, payload)
		if err != nil && !errors.Is(err, api.ErrNotRunning) {
			return fmt.Errorf("hook: the running node: %w", err)
		}
	}
	if a == nil {
		grants, err := policy.ParseHookGrants(hooksSee)
		if err != nil {
			return &usageError{err}
		}
		project, err := policy.ParseHookProject(hooksProject)
		if err != nil {
			return &usageError{err}
		}
		ans, err := hookStandalone(ctx, d, backend, grants, project, p)
		if err != nil {
			return err
		}
		a = &api.HookAnswer{Exit: ans.Exit, Stdout: ans.Stdout, Stderr: ans.Stderr, Decision: ans.Decision}
	}
	if a.Stdout != "" {
		fmt.Fprintln(stdout, a.Stdout)
	}
	if a.Stderr != "" {
		fmt.Fprintln(stderr, a.Stderr)
	}
	if a.Exit != 0 {
		return &exitError{code: a.Exit}
	}
	return nil
}

// hookStandalone runs the hooks without a node, as `exec` runs a command: the
// sandboxes a strict node would give them, each plugin's egress served for as long
// as its hooks run.
func hookStandalone(ctx context.Context, d datadir.Dir, backend string, grants []policy.HookGrant, projectGrants []string, p *hookrun.Payload) (hookrun.Answer, error) {
	all, errs := installed.List(d)
	if len(all) == 0 && len(errs) > 0 {
		return hookrun.Answer{}, fmt.Errorf("hook: list installed plugins: %w", errors.Join(errs...))
	}
	cfg := execConfig(d, backend, false)
	cfg.HookGrants, cfg.HookProject = grants, projectGrants
	// Which hooks run, and whether any needs gVisor, before probing: a plan's
	// manifests do not depend on the tier.
	plans, _ := plan.New(d, cfg, probe.Verdict{}, nil).Plan(all)
	var plugins []hookrun.Plugin
	for _, pl := range plans {
		plugins = append(plugins, hookrun.Plugin{Name: pl.Installed.Name, Hooks: pl.Manifest.Hooks})
	}
	owner, names := hookrun.Owner(p.Tool, func(name string) bool {
		return slices.ContainsFunc(all, func(in *installed.Plugin) bool { return in.Name == name })
	})
	cands := hookrun.Select(plugins, grants, p, owner, names)
	if len(cands) == 0 {
		return hookrun.Answer{Decision: hookrun.Allow}, nil
	}
	needGVisor := false
	for _, c := range cands {
		for _, pl := range plans {
			if pl.Installed.Name == c.Plugin {
				needGVisor = needGVisor || pl.Manifest.Isolation == manifest.IsolationGVisor || cfg.PluginBackends[c.Plugin] == policy.BackendGVisor
			}
		}
	}
	// The data folder's probe cache decides, as for exec: an agent calls `oz0-node
	// hook` on every event, and a probe sandbox each time would cost more than the
	// hook's own.
	tr, err := probe.Run(ctx, platform(), backend, probe.LoadCache(d, platform()))
	if err != nil {
		return hookrun.Answer{}, err
	}
	if needGVisor && !tr.GVisor {
		tr.Later(ctx, policy.BackendGVisor) // not known to work yet: probe it now
	}
	rs, _ := nodeRuntimes(d)
	n := plan.New(d, cfg, tr.Verdict(), rs)
	// Each plugin's egress endpoint opens once, before its hooks start.
	eg := &hookEgress{d: d, goos: n.OS}
	defer eg.close()
	results := hookrun.RunAll(ctx, cands, func(ctx context.Context, c hookrun.Candidate) hookrun.Result {
		fail := func(err error) hookrun.Result { return hookrun.Result{Exit: -1, Err: "not run: " + err.Error()} }
		pl, err := n.One(c.Plugin) // decided now, like every start
		if err != nil {
			return fail(err)
		}
		var px plan.Proxy
		if ht := pl.Decision.Hooks[c.Index]; ht.Network == policy.NetProxy || ht.Network == policy.NetHostProxyVars {
			if px, err = eg.endpoint(pl, ht.Backend, ht.Network); err != nil {
				return fail(err)
			}
		}
		spec, t, err := pl.HookSpec(c.Index, px)
		if err != nil {
			return fail(err)
		}
		if err := pl.EnsureHome(); err != nil {
			return fail(err)
		}
		if t.Action == policy.Sandboxed && t.User.PerPlugin {
			if err := preparePlugin(d, n.NodeBinary)(pl); err != nil {
				return fail(err)
			}
		}
		b, err := tr.For(spec.Backend)
		if err != nil {
			return fail(err)
		}
		home, _ := os.UserHomeDir()
		project, err := hookrun.Project(projectGrants, c.Plugin, p.Cwd, d.Root, home)
		if err != nil {
			fmt.Fprintln(os.Stderr, "oz0-node hook: runs without the project:", err)
		}
		hookrun.WithProject(spec, project)
		return runHookSandbox(ctx, b, spec, t.Timeout, p.Raw)
	})
	return hookrun.Merge(p.Event, results), nil
}

func runHookSandbox(ctx context.Context, b sandbox.Backend, spec *sandbox.Spec, timeout time.Duration, input []byte) hookrun.Result {
	if timeout <= 0 {
		timeout = policy.HookTimeoutCap
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	proc, err := b.Command(hctx, spec)
	if err != nil {
		return hookrun.Result{Exit: -1, Err: "not run: " + err.Error()}
	}
	r := hookrun.ExecWith(hctx, proc.Cmd, proc.Start, input)
	if proc.Cleanup != nil {
		proc.Cleanup()
	}
	return r
}

// hookEgress serves, for hooks run without a node, each plugin's own egress
// endpoint (the one its hooks' sandboxes use), with the manifest's lists and the
// tenant's list as they stand, for as long as the hooks run.
type hookEgress struct {
	d    datadir.Dir
	goos string
	mu   sync.Mutex
	px   *egress.Proxy
	eps  *egress.Endpoints
}

// endpoint is the plugin's own endpoint, opened the first time one of its hooks
// needs it.
func (h *hookEgress) endpoint(p *plan.Plugin, backend string, network policy.Network) (plan.Proxy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := p.Installed.Name
	if h.px == nil {
		pr, eps, err := standaloneEgress(h.d)
		if err != nil {
			return plan.Proxy{}, fmt.Errorf("hook: %w", err)
		}
		h.px, h.eps = pr, eps
	}
	if !h.eps.Open(name, "") {
		want := egress.Want{HostPort: sandbox.HostPort(h.goos, backend, network)}
		if p.Decision.User.PerPlugin {
			want.GID = p.Decision.User.GID
		}
		if err := h.eps.Set(name, p.Manifest.Egress, p.Manifest.ServerEgress(), []egress.Want{want}); err != nil {
			return plan.Proxy{}, fmt.Errorf("hook: egress endpoint for plugin %s: %w", name, err)
		}
	}
	port, cred := h.eps.Endpoint(name, "")
	return plan.Proxy{Sockets: true, Port: port, Credential: cred}, nil
}

func (h *hookEgress) close() {
	if h.px != nil {
		h.px.Close()
	}
}
