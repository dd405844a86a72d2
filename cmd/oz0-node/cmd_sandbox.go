package main

import (
	"github.com/spf13/cobra"
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
			return notYet("oz0-node sandbox show")
		},
	}
	show.Flags().StringVar(&server, "server", "", "the server (default: the plugin's first)")
	show.Flags().StringVar(&backend, "backend", "", "bwrap, gvisor or seatbelt (default: the node's)")
	c.AddCommand(show)
	return c
}
