package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
)

func newRestartCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "restart PLUGIN/SERVER",
		Short: "Restart one server of the running node (it is planned again: new values, new decision)",
		Long: `Restart one server of the running node. The start plans it again, so a value set
with 'oz0-node plugin config' since it started applies now.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			plugin, server, ok := strings.Cut(args[0], "/")
			if !ok || plugin == "" || server == "" {
				return usagef("%q: give PLUGIN/SERVER", args[0])
			}
			d, err := g.dir()
			if err != nil {
				return err
			}
			if err := api.NewClient(d.Control()).Restart(context.Background(), plugin, server); err != nil {
				return fmt.Errorf("restart %s/%s: %w", plugin, server, err)
			}
			printf(cmd.OutOrStdout(), "restarting %s/%s\n", plugin, server)
			return nil
		},
	}
}
