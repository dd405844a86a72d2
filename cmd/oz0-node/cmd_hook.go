package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// hookDeadline is the longest `oz0-node hook` takes: every hook runs at most the
// node's cap and they run side by side, so the answer comes well within Claude
// Code's own limit for a command hook (the timeout setup writes).
const hookDeadline = policy.HookTimeoutCap + 15*time.Second

func newHookCmd(g *globals) *cobra.Command {
	var backend string
	var hooksSee, hooksProject, hooksApprove, hooksEgress []string
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
			return runHook(ctx, g, backend, hookFlags{see: hooksSee, project: hooksProject, approve: hooksApprove, egress: hooksEgress}, os.Stdin, os.Stdout, os.Stderr)
		},
	}
	c.Flags().StringVar(&backend, "backend", "auto", "without a running node: sandbox backend auto, bwrap, gvisor, landlock, seatbelt or none")
	c.Flags().StringArrayVar(&hooksSee, "plugin-hooks-see", nil,
		"without a running node: let WATCHER's hooks see OTHER's tool calls: WATCHER=OTHER (a running node uses its own)")
	c.Flags().StringArrayVar(&hooksProject, "plugin-hooks-project", nil,
		"without a running node: let PLUGIN's hooks read the session's project (its cwd) read-only (a running node uses its own)")
	c.Flags().StringArrayVar(&hooksApprove, "plugin-hooks-approve", nil,
		"without a running node: let PLUGIN's hooks speak the whole hook protocol for every tool, not only its own (a running node uses its own)")
	c.Flags().StringArrayVar(&hooksEgress, "plugin-hooks-egress", nil,
		"without a running node: let PLUGIN's hooks keep its egress when they receive the agent's data (a running node uses its own)")
	return c
}

// hookFlags are the grants `oz0-node hook` takes when no node runs (a running
// node answers with its own).
type hookFlags struct {
	see, project, approve, egress []string
}

// runHook answers one hook event. A failure of its own is a non-blocking error
// (exit 1), as Claude Code reads any exit code but 0 and 2.
func runHook(ctx context.Context, g *globals, backend string, flags hookFlags, in io.Reader, stdout, stderr io.Writer) error {
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
	// The running node answers; only when none answers on the control socket do
	// the hooks run here.
	a, err := api.NewClient(d.Control()).Hook(ctx, payload)
	if err != nil && !errors.Is(err, api.ErrNotRunning) {
		return fmt.Errorf("hook: the running node: %w", err)
	}
	if a == nil {
		cfg := execConfig(d, backend, false)
		if cfg.HookGrants, err = policy.ParseHookGrants(flags.see); err != nil {
			return &usageError{err}
		}
		if cfg.HookProject, err = policy.ParseHookProject(flags.project); err != nil {
			return &usageError{err}
		}
		if cfg.HookApprove, err = policy.ParseHookApprove(flags.approve); err != nil {
			return &usageError{err}
		}
		if cfg.HookEgress, err = policy.ParseHookEgress(flags.egress); err != nil {
			return &usageError{err}
		}
		ans, err := hookStandalone(ctx, d, cfg, p)
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
func hookStandalone(ctx context.Context, d datadir.Dir, cfg config.Run, p *hookrun.Payload) (hookrun.Answer, error) {
	all, errs := installed.List(d)
	if len(all) == 0 && len(errs) > 0 {
		return hookrun.Answer{}, fmt.Errorf("hook: list installed plugins: %w", errors.Join(errs...))
	}
	backend, grants := cfg.Backend, cfg.HookGrants
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
	own := hookrun.Served(p.Tool)
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
	// Each plugin's egress endpoint opens once, before its hooks start, and
	// closes when they are done.
	s, closeEgress := starter(d, plan.New(d, cfg, tr.Verdict(), rs), tr, false)
	defer closeEgress()
	home, _ := os.UserHomeDir()
	results := hookrun.RunAll(ctx, cands, func(ctx context.Context, c hookrun.Candidate) hookrun.Result {
		project, err := hookrun.Project(cfg.HookProject, c.Plugin, p.Cwd, d.Root, home)
		if err != nil {
			fmt.Fprintln(os.Stderr, "oz0-node hook: runs without the project:", err)
		}
		st, err := s.Hook(ctx, c.Plugin, c.Index, own, project) // decided now, like every start
		if err != nil {
			return hookrun.Result{Exit: -1, Err: "not run: " + err.Error()}
		}
		defer st.Close()
		r := hookrun.ExecWith(st.Ctx, st.Proc.Cmd, st.Proc.Start, p.Raw)
		r.Network = string(st.Target.Network)
		return r
	})
	a := hookrun.Merge(p.Event, results, func(plugin string) bool { return policy.HookAuthority(cfg.HookApprove, plugin, own) })
	auditHookRuns(d, p, a)
	return a, nil
}

// auditHookRuns writes the runs of hooks run without a node to the audit stream,
// as the node writes its own (a data folder without logs/ has no stream yet).
func auditHookRuns(d datadir.Dir, p *hookrun.Payload, a hookrun.Answer) {
	if fi, err := os.Stat(d.Logs()); len(a.Runs) == 0 || err != nil || !fi.IsDir() {
		return
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := audit.Open(d.Audit(), audit.Options{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "oz0-node hook: audit stream:", err)
		return
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, o := range a.Runs {
		s.Add(api.AuditOfHook(api.HookRun{Time: now, Plugin: o.Plugin, Event: p.Event, Tool: p.Tool, Source: "agent",
			Decision: o.Decision, Reason: o.Reason, Seconds: o.Duration.Seconds(), Network: o.Network, Dropped: o.Dropped}, p.SessionID))
	}
	s.Close()
}
