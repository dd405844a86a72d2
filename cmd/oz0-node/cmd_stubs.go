package main

import (
	"github.com/spf13/cobra"
)

func newRunCmd(g *globals) *cobra.Command {
	rf := &runFlags{}
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the node: probe the sandbox tier, start the egress proxy and every installed plugin's servers",
		Long: `Run the node in the foreground. It probes which sandbox backend works (the tier),
fixes the data folder's modes, starts the egress proxy, then starts every installed
plugin's MCP servers as the policy decides, and serves MCP and the control API on
sockets under <data>/run. SIGTERM or SIGINT stop it; SIGHUP reconciles plugins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := rf.parse(g); err != nil {
				return err
			}
			return notYet("oz0-node run")
		},
	}
	rf.add(c)
	return c
}

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
			return notYet("oz0-node exec")
		},
	}
	c.Flags().StringVar(&server, "server", "", "the server whose sandbox to use (default: the plugin's first)")
	c.Flags().StringVar(&backend, "backend", "auto", "sandbox backend: auto, bwrap, gvisor or none")
	return c
}

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
			return notYet("oz0-node sandbox show")
		},
	}
	show.Flags().StringVar(&server, "server", "", "the server (default: the plugin's first)")
	show.Flags().StringVar(&backend, "backend", "", "bwrap, gvisor or seatbelt (default: the node's)")
	c.AddCommand(show)
	return c
}

func newCallCmd(g *globals) *cobra.Command {
	var kv []string
	var jsonArgs string
	c := &cobra.Command{
		Use:   "call TOOL [--arg k=v]… [--json ARGS]",
		Short: "Call a tool (<plugin>__<tool>) through the running node and print the result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return notYet("oz0-node call")
		},
	}
	c.Flags().StringArrayVar(&kv, "arg", nil, "a tool argument key=value (numbers and booleans are parsed); repeatable")
	c.Flags().StringVar(&jsonArgs, "json", "", "the tool arguments as one JSON object")
	return c
}

func newMCPCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the node's tools over stdio MCP (for any MCP client to launch)",
		Long: `A stdio bridge to the running node's MCP endpoint, so any MCP client can use the
node's tools: e.g. claude mcp add oz0 -- oz0-node mcp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notYet("oz0-node mcp")
		},
	}
}

func newTUICmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tui",
		Short: "Open the live terminal UI: plugins, findings, exemptions, egress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return notYet("oz0-node tui")
		},
	}
}

func newServiceCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "service",
		Short: "Install and control the node as a systemd or launchd service",
	}
	rf := &runFlags{}
	install := &cobra.Command{
		Use:   "install [run flags…]",
		Short: "Install the node as a service with the given run flags (validated as run validates them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := rf.parse(g); err != nil {
				return err
			}
			return notYet("oz0-node service install")
		},
	}
	rf.add(install)
	c.AddCommand(install)
	for _, v := range []struct{ use, short string }{
		{"uninstall", "Remove the service"},
		{"start", "Start the service"},
		{"stop", "Stop the service"},
		{"restart", "Restart the service"},
		{"status", "Say what the service manager and the node's control socket report"},
	} {
		use := v.use
		c.AddCommand(&cobra.Command{
			Use: use, Short: v.short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return notYet("oz0-node service " + use) },
		})
	}
	urf := &runFlags{}
	var goos string
	unit := &cobra.Command{
		Use:   "unit [--os linux|darwin] [run flags…]",
		Short: "Print exactly the unit or plist that install would write",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := urf.parse(g); err != nil {
				return err
			}
			return notYet("oz0-node service unit")
		},
	}
	unit.Flags().StringVar(&goos, "os", "", "linux or darwin (default: this OS)")
	urf.add(unit)
	c.AddCommand(unit)
	return c
}
