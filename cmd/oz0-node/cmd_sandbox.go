package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/spf13/cobra"

	backenddarwin "oz0.ai/node/backend_darwin"
	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/launch"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/termtext"
)

func newSandboxCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "sandbox", Short: "Inspect the sandboxes the node builds"}
	var server, backend string
	show := &cobra.Command{
		Use:   "show PLUGIN [--server S] [--backend bwrap|gvisor|landlock|seatbelt]",
		Short: "Print the exact sandbox a start would build, without running anything",
		Long: `Print the exact sandbox a start of PLUGIN's server would build — the bwrap argv, the
OCI config.json for gVisor, the Landlock runner's rules with what that tier does not
cover here, or the Seatbelt profile with its parameters — without running anything, so
an operator or a reviewer can read what the node will do.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := showSandbox(g, args[0], server, backend)
			if err != nil {
				return err
			}
			// The argv and environment shown are the manifest's text.
			fmt.Fprint(cmd.OutOrStdout(), termtext.Clean(out))
			return nil
		},
	}
	show.Flags().StringVar(&server, "server", "", "the server (default: the plugin's first)")
	show.Flags().StringVar(&backend, "backend", "", "bwrap, gvisor, landlock or seatbelt (default: the node's)")
	c.AddCommand(show)
	return c
}

// showSandbox plans the plugin as a tier-1 node with that backend would and renders
// the server's sandbox. It probes nothing and starts nothing.
func showSandbox(g *globals, plugin, server, backend string) (string, error) {
	d, err := g.dir()
	if err != nil {
		return "", err
	}
	s, err := showSpec(d, plugin, server, backend)
	if err != nil {
		return "", err
	}
	spec, t := s.spec, s.target
	head := fmt.Sprintf("# plugin %s, %s %s: %s on %s, %s, network %s\n", plugin, t.Kind, t.Name, t.Action, spec.Backend, t.User, spec.Network)
	if s.hooks {
		head += "# hooks: " + hookProjectLine(d, plugin) + "\n"
		for _, l := range hookTrustLines(d, plugin) {
			head += "# hooks: " + l + "\n"
		}
	}
	var body string
	switch spec.Backend {
	case policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock:
		body, err = backendlinux.Render(spec.Backend, spec)
	case policy.BackendSeatbelt:
		body, err = backenddarwin.Preview(spec)
	default:
		body, err = sandbox.Direct{}.Render(spec)
	}
	if err != nil {
		return "", err
	}
	return head + body, nil
}

// shownSpec is the sandbox sandbox show renders: a server's (or, for a plugin
// without one, its first hook's), as a start builds it, the operator's secret
// values redacted.
type shownSpec struct {
	spec   *sandbox.Spec
	target policy.Target
	hooks  bool // the plugin has hooks
}

// showSpec builds the sandbox a start of the plugin's server would get, on a node
// where backend (default: this OS's usual one) works, with the running node's run
// configuration when one runs (strict without exemptions else), as exec does.
func showSpec(d datadir.Dir, plugin, server, backend string) (*shownSpec, error) {
	goos := runtime.GOOS
	switch backend {
	case "":
		backend = policy.BackendBwrap
		if goos == "darwin" {
			backend = policy.BackendSeatbelt
		}
		if v, ok := probe.Running(readNodeStatus(d)); ok && v.Backend != policy.BackendNone && nodeRunning(d) {
			backend = v.Backend // the running node's (Landlock where user namespaces are refused)
		}
	case policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock:
		goos = "linux"
	case policy.BackendSeatbelt:
		goos = "darwin"
	default:
		return nil, usagef("--backend %q: must be bwrap, gvisor, landlock or seatbelt", backend)
	}
	running := nodeRunning(d)
	rs, _ := nodeRuntimes(d)
	// As a node where this backend (and gVisor, for plugins raised to it) works.
	n := plan.New(d, execConfig(d, backend, running), probe.Assume(goos, backend, goos == "linux"), rs)
	p, err := n.One(plugin)
	if err != nil {
		return nil, err
	}
	// What is shown carries the operator's secret values redacted.
	p = p.Shown()
	if server == "" {
		server = p.ExecServer("") // the first server that runs plugin code
	}
	var spec *sandbox.Spec
	var t policy.Target
	switch {
	case server != "":
		spec, t, err = p.ServerSpec(server, shownProxy(d, plugin, server, running))
	case len(p.Manifest.Hooks) > 0:
		// As it runs for the agent's own events, which carry the agent's data.
		spec, t, err = p.HookSpec(0, "", shownProxy(d, plugin, "", running))
	default:
		return nil, fmt.Errorf("plugin %s has no servers or hooks", plugin)
	}
	if err != nil {
		return nil, err
	}
	// The view of its folder the sandbox binds is made at its first start; a
	// preview before one makes it now, as that start would (node/view).
	if err := p.EnsureView(spec); err != nil {
		return nil, err
	}
	return &shownSpec{spec: spec, target: t, hooks: len(p.Manifest.Hooks) > 0}, nil
}

// shownProxy is the egress endpoint of a plugin's server ("" its own) as the
// preview shows it: its socket folder bound where it is served now (by the
// running node, or an exec), and the running node's port where it has one (the
// credential is never shown); else the preview says the port is assigned at start.
func shownProxy(d datadir.Dir, plugin, server string, running bool) plan.Proxy {
	dir := d.EgressSocketDir(plugin)
	if server != "" {
		dir = d.EgressServerSocketDir(plugin, server)
	}
	_, err := os.Stat(dir)
	px := plan.Proxy{Sockets: err == nil}
	if running {
		px.Port, _ = launch.NodeProxyPort(d, plugin, server)
	}
	return px
}

// hookTrustLines say what the plugin's hooks may answer and reach: by the running
// node's --plugin-hooks-approve and --plugin-hooks-egress, or the defaults
// without one (a standalone oz0-node hook takes the same flags per call).
func hookTrustLines(d datadir.Dir, plugin string) []string {
	var run config.Run
	if nodeRunning(d) {
		run, _ = config.FromStatus(readNodeStatus(d))
	}
	authority := "answer with the whole hook protocol only for the plugin's own tools; for the agent's tools and other plugins' they may only deny, ask, block, stop or add context (the operator widens this with " + policy.HookApproveFlag + " " + plugin + ")"
	if slices.Contains(run.HookApprove, plugin) {
		authority = "answer with the whole hook protocol for every tool, the agent's own included (" + policy.HookApproveFlag + " " + plugin + ")"
	}
	network := "run with no network for any event but a call of the plugin's own tool, since they receive the agent's data (the operator grants egress with " + policy.HookEgressFlag + " " + plugin + ")"
	if slices.Contains(run.HookEgress, plugin) {
		network = "keep the plugin's egress for every event, the agent's data included (" + policy.HookEgressFlag + " " + plugin + ")"
	}
	return []string{authority, network}
}

// hookProjectLine says whether the plugin's hooks read the agent session's
// project: by the running node's --plugin-hooks-project, or never without one
// (a standalone oz0-node hook grants it per call with the same flag).
func hookProjectLine(d datadir.Dir, plugin string) string {
	if st := readNodeStatus(d); st != nil && nodeRunning(d) {
		for _, p := range st.Plugins {
			if p.Name == plugin && p.HooksProject {
				return "read the agent session's project (its cwd) read-only, bound at its own path (--plugin-hooks-project " + plugin + ")"
			}
		}
	}
	return "do not see the agent session's project (the operator grants it with --plugin-hooks-project " + plugin + "); write access is never offered"
}
