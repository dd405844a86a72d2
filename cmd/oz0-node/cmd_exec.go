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
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
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
	attachExecEgress(x.spec)
	return runSandboxed(ctx, x.backend, x.spec)
}

// execRun is a prepared exec: its sandbox, the backend that runs it, and the
// egress endpoint exec serves for as long as it runs (stop closes it).
type execRun struct {
	spec    *sandbox.Spec
	backend sandbox.Backend
	stop    func()
}

// prepareExec plans the plugin as the running node would (or a default strict node
// when none runs), gives the sandbox its egress endpoint, and builds its spec once.
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
		if p, err = n.One(plugin); err != nil {
			return nil, err
		}
	}
	if p.Decision.Refused != "" {
		return nil, fmt.Errorf("plugin %s is refused: %s", plugin, p.Decision.Refused)
	}
	t, err := p.ExecTarget(server)
	if err != nil {
		return nil, err
	}
	px, stop := plan.Proxy{}, func() {}
	if t.Network == policy.NetProxy || t.Network == policy.NetHostProxyVars {
		if px, stop, err = execEgress(d, n.OS, p, server, t.Backend, t.Network, running); err != nil {
			return nil, err
		}
	}
	x := &execRun{stop: stop}
	defer func() {
		if x.spec == nil {
			stop()
		}
	}()
	spec, _, err := p.ExecSpec(server, argv, px)
	if err != nil {
		return nil, err
	}
	if x.backend, err = tr.For(spec.Backend); err != nil {
		return nil, err
	}
	if err := p.EnsureHome(); err != nil {
		return nil, err
	}
	x.spec = spec
	return x, nil
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

// execEgress gives exec the egress endpoint of the server whose sandbox it takes
// (its own lists, narrowed as that server's). A running node already serves it
// (its control socket answers), so the sandbox binds that node's socket folder, or
// under auto and Seatbelt is pointed at that node's port with the endpoint's
// credential, which exec derives from the node's key as the node does. Otherwise
// exec opens the endpoint itself for as long as it runs, with the manifest's lists
// and the tenant's list as they stand, and a host-loopback port only where the
// sandbox needs one.
func execEgress(d datadir.Dir, goos string, p *plan.Plugin, server, backend string, network policy.Network, running bool) (plan.Proxy, func(), error) {
	px := plan.Proxy{Sockets: true}
	name := p.Installed.Name
	epServer := p.ExecServer(server)
	hostPort := sandbox.HostPort(goos, backend, network)
	if running {
		if hostPort {
			var err error
			if px.Credential, err = egress.NodeCredential(d, name, epServer); err != nil {
				return px, nil, fmt.Errorf("exec: %w", err)
			}
			if px.Port, err = nodeProxyPort(d, name, epServer); err != nil {
				return px, nil, err
			}
		}
		return px, func() {}, nil
	}
	pr, eps, err := standaloneEgress(d)
	if err != nil {
		return px, nil, fmt.Errorf("exec: %w", err)
	}
	want := egress.Want{Server: epServer, HostPort: hostPort}
	if p.Decision.User.PerPlugin {
		want.GID = p.Decision.User.GID
	}
	if err := eps.Set(name, p.Manifest.Egress, p.Manifest.ServerEgress(), []egress.Want{want}); err != nil {
		pr.Close()
		return px, nil, fmt.Errorf("exec: egress endpoint for plugin %s: %w", name, err)
	}
	px.Port, px.Credential = eps.Endpoint(name, epServer)
	return px, func() { pr.Close() }, nil
}

// nodeProxyPort asks the running node for the host-loopback port of a plugin's
// server's egress endpoint ("" for the plugin's own).
func nodeProxyPort(d datadir.Dir, plugin, server string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := api.NewClient(d.Control()).Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("exec: ask the running node for plugin %s's egress endpoint: %w", plugin, err)
	}
	for _, pl := range st.Plugins {
		if pl.Name != plugin {
			continue
		}
		if server == "" && pl.ProxyPort > 0 {
			return pl.ProxyPort, nil
		}
		for _, s := range pl.Servers {
			if s.Name == server && s.ProxyPort > 0 {
				return s.ProxyPort, nil
			}
		}
	}
	return 0, fmt.Errorf("exec: the running node has no egress endpoint for plugin %s (server %q) yet (it opens one when it takes up the plugin; try again in a moment)", plugin, server)
}

// runSandboxed runs a prepared sandbox with stdio attached and passes its exit code
// through. SIGINT, SIGTERM and SIGHUP (its terminal closed) go to the sandbox; exec
// waits for it and cleans up.
func runSandboxed(ctx context.Context, b sandbox.Backend, spec *sandbox.Spec) error {
	proc, err := b.Command(ctx, spec)
	if err != nil {
		return err
	}
	defer proc.Cleanup()
	proc.Cmd.Stdin, proc.Cmd.Stdout, proc.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := proc.Start(); err != nil {
		return fmt.Errorf("start %s sandbox for plugin %s: %w", b.Name(), spec.Plugin, err)
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
	err = proc.Cmd.Wait()
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
		return fmt.Errorf("run %s sandbox for plugin %s: %w", b.Name(), spec.Plugin, err)
	}
	return nil
}
