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
