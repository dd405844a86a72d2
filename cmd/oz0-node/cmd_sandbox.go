package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	backenddarwin "oz0.ai/node/backend_darwin"
	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/termtext"
)

func newSandboxCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "sandbox", Short: "Inspect the sandboxes the node builds"}
	var server, backend string
	show := &cobra.Command{
		Use:   "show PLUGIN [--server S] [--backend bwrap|gvisor|seatbelt]",
		Short: "Print the exact sandbox a start would build, without running anything",
		Long: `Print the exact sandbox a start of PLUGIN's server would build — the bwrap argv, the
OCI config.json for gVisor, or the Seatbelt profile with its parameters — without
running anything, so an operator or a reviewer can read what the node will do.`,
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
	show.Flags().StringVar(&backend, "backend", "", "bwrap, gvisor or seatbelt (default: the node's)")
	c.AddCommand(show)
	return c
}

// showSandbox plans the plugin as a tier-1 node with that backend would and renders
// the server's sandbox. It probes nothing and starts nothing.
func showSandbox(g *globals, plugin, server, backend string) (string, error) {
	goos := runtime.GOOS
	switch backend {
	case "":
		backend = policy.BackendBwrap
		if goos == "darwin" {
			backend = policy.BackendSeatbelt
		}
	case policy.BackendBwrap, policy.BackendGVisor:
		goos = "linux"
	case policy.BackendSeatbelt:
		goos = "darwin"
	default:
		return "", usagef("--backend %q: must be bwrap, gvisor or seatbelt", backend)
	}
	d, err := g.dir()
	if err != nil {
		return "", err
	}
	// The running node's mode, exemptions and grants, as exec uses; strict when none
	// runs. Its proxy port for the server when it runs (the credential is never
	// shown); else the preview says the port is assigned at start.
	running := nodeRunning(d)
	n := plan.NodeFacts(d, execConfig(d, backend, running), goos)
	if running {
		n.ProxyEndpoint = func(plugin, server string) (int, string) {
			port, _ := nodeProxyPort(d, plugin, server)
			return port, ""
		}
	}
	// As a node where this backend (and gVisor, for plugins raised to it) works.
	n.Tier, n.Backend, n.GVisor = 1, backend, goos == "linux"
	if rs, err := installed.Runtimes(d); err == nil {
		n.Runtimes = rs
	}
	p, err := n.One(plugin)
	if err != nil {
		return "", err
	}
	// What is shown carries the operator's secret values redacted.
	p = p.Shown()
	var spec *sandbox.Spec
	var t policy.Target
	switch {
	case server != "" || p.ExecServer("") != "":
		if server == "" {
			server = p.ExecServer("") // the first server that runs plugin code
		}
		spec, t, err = p.ServerSpec(server)
	case len(p.Manifest.Hooks) > 0:
		spec, t, err = p.HookSpec(0)
	default:
		return "", fmt.Errorf("plugin %s has no servers or hooks", plugin)
	}
	if err != nil {
		return "", err
	}
	head := fmt.Sprintf("# plugin %s, %s %s: %s on %s, %s, network %s\n", plugin, t.Kind, t.Name, t.Action, spec.Backend, t.User, spec.Network)
	if len(p.Manifest.Hooks) > 0 {
		head += "# hooks: " + hookProjectLine(d, plugin) + "\n"
	}
	var body string
	switch spec.Backend {
	case policy.BackendBwrap, policy.BackendGVisor:
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
