package main

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"oz0.ai/node/tui"
)

func newTUICmd(g *globals) *cobra.Command {
	var noColor bool
	c := &cobra.Command{
		Use:   "tui",
		Short: "Open the live terminal UI: plugins, findings, exemptions, egress",
		Long: `Open the live terminal UI on the running node's control socket (<data>/run/control.sock).
It follows the node's event stream, so changes show as they happen, and reconnects
with back-off when the node goes away. Views: 1 plugins, 2 findings, 3 exemptions,
4 egress, 5 a followed server log; '?' lists every key. NO_COLOR (or --no-color)
draws plain text.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			// The terminal is the UI's: ctrl+c arrives as a key; SIGTERM ends it.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM)
			defer stop()
			return tui.Run(ctx, d.Control(), tui.Options{NoColor: noColor, DataDir: d.Root, AltScreen: true})
		},
	}
	c.Flags().BoolVar(&noColor, "no-color", false, "draw plain text without colour (as NO_COLOR does)")
	return c
}
