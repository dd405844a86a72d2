package main

import (
	"github.com/spf13/cobra"
)

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
