// Command oz0-node-tui is the node's live terminal UI. It is a binary of its own so
// that no other oz0-node command loads the terminal library, whose start-up asks
// the terminal for its colours (a terminal that never answers would stall every
// command). `oz0-node tui` runs it; it can also be run directly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/tui"
)

func main() {
	fs := flag.NewFlagSet("oz0-node-tui", flag.ContinueOnError)
	dataDir := fs.String("data-dir", datadir.Default(), "the node's data folder (env "+datadir.EnvVar+")")
	noColor := fs.Bool("no-color", false, "draw plain text without colour (as NO_COLOR does)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "oz0-node-tui: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	d, err := datadir.New(*dataDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oz0-node-tui:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := tui.Run(ctx, d.Control(), tui.Options{NoColor: *noColor, DataDir: d.Root, AltScreen: true}); err != nil {
		fmt.Fprintln(os.Stderr, "oz0-node-tui:", err)
		os.Exit(1)
	}
}
