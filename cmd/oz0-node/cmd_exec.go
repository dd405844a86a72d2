package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
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
	c.Flags().StringVar(&backend, "backend", "auto", "sandbox backend: auto, bwrap, gvisor or none")
	return c
}

// execBackends are the values `exec --backend` accepts.
var execBackends = []string{"auto", policy.BackendBwrap, policy.BackendGVisor, policy.BackendSeatbelt, policy.BackendNone}

func runExec(ctx context.Context, g *globals, plugin, server, backend string, argv []string) error {
	if !slices.Contains(execBackends, backend) {
		return usagef("--backend %q: must be auto, bwrap, gvisor, seatbelt or none", backend)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	d, err := g.dir()
	if err != nil {
		return err
	}
	tr, err := cachedBackends(ctx, d, backend)
	if err != nil {
		return err
	}
	def := tr.Works[tr.Backend]
	running := nodeRunning(d)
	n := plan.NodeFacts(d, execConfig(d, backend, running), runtime.GOOS)
	n.Tier, n.Backend, n.GVisor = tr.Tier, tr.Backend, tr.GVisor
	if rs, err := install.Runtimes(d); err == nil {
		n.Runtimes = rs // the managed Python and Node.js its servers get
	}
	p, err := n.One(plugin)
	if err != nil {
		return err
	}
	if needsGVisor(p.Decision) && tr.probeLater(ctx, policy.BackendGVisor) {
		// Raised to gVisor, which was not probed yet and works: plan again with it.
		n.GVisor = true
		if p, err = n.One(plugin); err != nil {
			return err
		}
	}
	if p.Decision.Refused != "" {
		return fmt.Errorf("plugin %s is refused: %s", plugin, p.Decision.Refused)
	}
	spec, _, err := p.ExecSpec(server, argv)
	if err != nil {
		return err
	}
	if spec.Network == policy.NetProxy || spec.Network == policy.NetHostProxyVars {
		stop, err := execEgress(d, n, p, server, spec, running)
		if err != nil {
			return err
		}
		defer stop()
		if spec, _, err = p.ExecSpec(server, argv); err != nil {
			return err
		}
	}
	b, err := backendFor(spec.Backend, def)
	if err != nil {
		return err
	}
	if err := p.EnsureHome(); err != nil {
		return err
	}
	attachExecEgress(spec)
	return runSandboxed(ctx, b, spec)
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

// execConfig is what exec plans with: the running node's mode and exemptions, so
// the sandbox is the one its servers get, or strict without exemptions when no node
// runs (what a default node would do).
func execConfig(d datadir.Dir, backend string, running bool) config.Run {
	cfg := config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: backend}
	st := readNodeStatus(d)
	if !running || st == nil {
		return cfg
	}
	if m, err := policy.ParseMode(st.Node.Mode); err == nil {
		cfg.Mode = m
	}
	var flags []string
	for _, e := range st.Exempt {
		flags = append(flags, e.Flag)
	}
	if ex, err := policy.ParseExemptions(flags); err == nil {
		cfg.Exemptions = ex
	}
	for _, p := range st.Plugins {
		if p.TLSTrustD {
			cfg.TrustD = append(cfg.TrustD, p.Name)
		}
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
func execEgress(d datadir.Dir, n *plan.Node, p *plan.Plugin, server string, spec *sandbox.Spec, running bool) (stop func(), err error) {
	n.ProxySockets = true
	name := p.Installed.Name
	epServer := p.ExecServer(server)
	hostPort := sandbox.HostPort(n.OS, spec.Network)
	var cred string
	if hostPort {
		creds, err := nodeCredentials(d)
		if err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
		if cred, err = creds.of(name, epServer); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
	}
	if running {
		if hostPort {
			port, err := nodeProxyPort(d, name, epServer)
			if err != nil {
				return nil, err
			}
			n.ProxyEndpoint = func(string, string) (int, string) { return port, cred }
		}
		return func() {}, nil
	}
	audit := ""
	if fi, err := os.Stat(d.Logs()); err == nil && fi.IsDir() {
		audit = d.Audit()
	}
	// exec is a foreground tool: the proxy speaks up only for what goes wrong.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// It follows the tenant list by polling its stat: an inotify watch would cost
	// every exec the kernel's ~10 ms to tear it down at exit (docs/performance.md).
	px, err := egress.New(egress.Config{TenantListPath: d.TenantList(), AuditPath: audit, Logger: quiet,
		PollOnly: true, PollInterval: execTenantPoll})
	if err != nil {
		return nil, fmt.Errorf("exec: egress proxy: %w", err)
	}
	group := 0
	if p.Decision.User.PerPlugin {
		group = int(p.Decision.User.GID)
	}
	ep, err := px.AddPlugin(egress.PluginRules{Plugin: name, Egress: p.Manifest.Egress, Servers: p.Manifest.ServerEgress()},
		egress.Listen{Socket: egressSocket(d, name, epServer), SocketGroup: group, Server: epServer, TCP: hostPort, Credential: cred})
	if err != nil {
		px.Close()
		return nil, fmt.Errorf("exec: egress endpoint for plugin %s: %w", name, err)
	}
	if hostPort {
		port := int(ep.TCP.Port())
		n.ProxyEndpoint = func(string, string) (int, string) { return port, cred }
	}
	return func() { px.Close() }, nil
}

// execTenantPoll is how often exec's own egress endpoint reads the tenant list's
// stat: a host taken off the list is refused within about this plus a read.
const execTenantPoll = 25 * time.Millisecond

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

// backendFor is the backend a spec names: the node's default, gVisor for a plugin
// raised to it (probed to work), or none for an unsandboxed target.
func backendFor(name string, def sandbox.Backend) (sandbox.Backend, error) {
	if name == policy.BackendNone {
		return sandbox.Direct{}, nil
	}
	if def != nil && def.Name() == name {
		return def, nil
	}
	for _, b := range platformBackends() {
		if b.Name() == name {
			return b, nil
		}
	}
	return nil, fmt.Errorf("sandbox backend %s: %w", name, sandbox.ErrUnavailable)
}

// runSandboxed runs a prepared sandbox with stdio attached and passes its exit code
// through. SIGINT and SIGTERM go to the sandbox; exec waits for it and cleans up.
func runSandboxed(ctx context.Context, b sandbox.Backend, spec *sandbox.Spec) error {
	proc, err := b.Command(ctx, spec)
	if err != nil {
		return err
	}
	defer proc.Cleanup()
	proc.Cmd.Stdin, proc.Cmd.Stdout, proc.Cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := proc.Cmd.Start(); err != nil {
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
