package main

import (
	"github.com/spf13/cobra"
)

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
