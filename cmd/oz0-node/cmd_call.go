package main

import (
	"github.com/spf13/cobra"
)

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
