package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/launch"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

func newExecCmd(g *globals) *cobra.Command {
	var server, backend string
	c := &cobra.Command{
		Use:   "exec PLUGIN [--server S] [--backend B] -- CMD [ARGS…]",
		Short: "Run a command in exactly the sandbox a plugin's servers get",
		Long: `Run a command in exactly the sandbox that PLUGIN's servers get (same user, mounts,
limits, network and environment), with stdio attached; the exit code is passed through.
For troubleshooting, and the test harness's door into a sandbox.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash != 1 {
				return usagef("exec: put the command after \"--\": oz0-node exec PLUGIN -- CMD [ARGS…]")
			}
			return runExec(cmd.Context(), g, args[0], server, backend, args[1:])
		},
	}
	c.Flags().StringVar(&server, "server", "", "the server whose sandbox to use (default: the plugin's first)")
	c.Flags().StringVar(&backend, "backend", "auto", "sandbox backend: auto, bwrap, gvisor, landlock or none")
	return c
}

// execBackends are the values `exec --backend` accepts.
var execBackends = []string{"auto", policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock, policy.BackendSeatbelt, policy.BackendNone}

func runExec(ctx context.Context, g *globals, plugin, server, backend string, argv []string) error {
	if !slices.Contains(execBackends, backend) {
		return usagef("--backend %q: must be auto, bwrap, gvisor, landlock, seatbelt or none", backend)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	d, err := g.dir()
	if err != nil {
		return err
	}
	x, err := prepareExec(ctx, d, plugin, server, backend, argv)
	if err != nil {
		return err
	}
	defer x.stop()
	return runSandboxed(x.start)
}

// execRun is a prepared exec: its sandbox, ready to start, and the egress
// endpoint exec serves for as long as it runs (stop closes both).
type execRun struct {
	start *launch.Start
	stop  func()
}

// prepareExec plans the plugin as the running node would (or a default strict node
// when none runs) and prepares its sandbox through the node's one starter, its
// egress endpoint the running node's or one exec serves itself.
func prepareExec(ctx context.Context, d datadir.Dir, plugin, server, backend string, argv []string) (*execRun, error) {
	tr, err := probe.Run(ctx, platform(), backend, probe.LoadCache(d, platform()))
	if err != nil {
		return nil, err
	}
	running := nodeRunning(d)
	cfg := execConfig(d, backend, running)
	rs, _ := nodeRuntimes(d) // the managed Python and Node.js its servers get
	n := plan.New(d, cfg, tr.Verdict(), rs)
	p, err := n.One(plugin)
	if err != nil {
		return nil, err
	}
	if needsGVisor(p.Decision) && tr.Later(ctx, policy.BackendGVisor) {
		// Raised to gVisor, which was not probed yet and works: plan again with it.
		n = plan.New(d, cfg, tr.Verdict(), rs)
	}
	s, closeEgress := starter(d, n, tr, running)
	st, err := s.Exec(ctx, plugin, server, argv)
	if err != nil {
		closeEgress()
		return nil, err
	}
	return &execRun{start: st, stop: func() { st.Close(); closeEgress() }}, nil
}

// starter is the one starter of a command that starts sandboxes outside the
// node's process (exec, hook): the probe's working backends, and the egress
// endpoints of the running node, or of a proxy the command serves itself for as
// long as it runs (the func closes it).
func starter(d datadir.Dir, n *plan.Node, tr *probe.Result, running bool) (*launch.Starter, func()) {
	s := &launch.Starter{Node: n, Backend: tr.For}
	if running {
		s.Egress = launch.Outside{Dir: d}
		return s, func() {}
	}
	eg := &launch.Standalone{Dir: d}
	s.Egress = eg
	return s, eg.Close
}

// needsGVisor reports whether a plugin was refused for want of gVisor.
func needsGVisor(d policy.Decision) bool {
	for _, f := range d.Findings {
		if f.Code == api.CodeGVisorRequired {
			return true
		}
	}
	return false
}

// nodeRunning reports whether a node serves this data folder (its control socket
// answers).
func nodeRunning(d datadir.Dir) bool {
	c, err := net.DialTimeout("unix", d.Control(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// execConfig is what exec plans with: the running node's run configuration as its
// status carries it (mode, exemptions, raised backends, grants), so the sandbox is
// the one its servers get, or strict without exemptions when no node runs (what a
// default node would do).
func execConfig(d datadir.Dir, backend string, running bool) config.Run {
	cfg := config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: backend}
	if !running {
		return cfg
	}
	if r, ok := config.FromStatus(readNodeStatus(d)); ok {
		cfg = r
		cfg.DataDir, cfg.Backend = d.Root, backend
	}
	return cfg
}

// runSandboxed runs a prepared sandbox with stdio attached and passes its exit code
// through. SIGINT, SIGTERM and SIGHUP (its terminal closed) go to the sandbox; exec
// waits for it (its caller cleans up).
func runSandboxed(st *launch.Start) error {
	proc, spec := st.Proc, st.Spec
	proc.Cmd.Stdin, proc.Cmd.Stdout, proc.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start %s sandbox for plugin %s: %w", spec.Backend, spec.Plugin, err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				proc.Cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := proc.Cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return &exitError{code: code}
	}
	if err != nil {
		return fmt.Errorf("run %s sandbox for plugin %s: %w", spec.Backend, spec.Plugin, err)
	}
	return nil
}
