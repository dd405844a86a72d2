package main

import (
	"github.com/spf13/cobra"
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
			return notYet("oz0-node exec")
		},
	}
	c.Flags().StringVar(&server, "server", "", "the server whose sandbox to use (default: the plugin's first)")
	c.Flags().StringVar(&backend, "backend", "auto", "sandbox backend: auto, bwrap, gvisor or none")
	return c
}
