package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/termtext"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	var n int
	c := &cobra.Command{
		Use:   "logs [PLUGIN[/SERVER]] [-f]",
		Short: "Show the node's own log, or a plugin's servers' stderr, from the running node",
		Long: `Show the last lines of the running node's own log (no argument), of every
server of PLUGIN, or of one server (PLUGIN/SERVER); -f keeps following. Lines come
from the node's memory over its control socket. What servers write is plugin text:
every line is printed with its terminal controls removed.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n <= 0 {
				return usagef("-n %d: must be at least 1", n)
			}
			st, err := readStatus(g) // also the "not running" message
			if err != nil {
				return err
			}
			d, err := g.dir()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			cl := api.NewClient(d.Control())
			w := cmd.OutOrStdout()
			if len(args) == 0 {
				return nodeLogs(ctx, cl, w, n, follow)
			}
			plugin, server, one := strings.Cut(args[0], "/")
			var servers []string
			for _, p := range st.Plugins {
				if p.Name != plugin {
					continue
				}
				for _, s := range p.Servers {
					if !one || s.Name == server {
						servers = append(servers, s.Name)
					}
				}
			}
			if len(servers) == 0 {
				return &exitError{code: exitFailure, msg: fmt.Sprintf("%s: no such plugin or server on the running node (see oz0-node status)", args[0])}
			}
			return serverLogs(ctx, cl, w, plugin, servers, n, follow, !one)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	c.Flags().IntVarP(&n, "lines", "n", 100, "how many of the last lines to show first")
	return c
}

func nodeLogs(ctx context.Context, cl *api.Client, w io.Writer, n int, follow bool) error {
	if !follow {
		lines, err := cl.NodeLogs(ctx, n)
		if err != nil {
			return err
		}
		for _, l := range lines {
			fmt.Fprintln(w, termtext.Line(l))
		}
		return nil
	}
	c, err := cl.FollowNode(ctx, n)
	if err != nil {
		return err
	}
	for l := range c {
		fmt.Fprintln(w, termtext.Line(l))
	}
	return nil
}

// serverLogs prints the servers' lines, each prefixed with its server's name when
// there are several, so no server's text can pass for another's.
func serverLogs(ctx context.Context, cl *api.Client, w io.Writer, plugin string, servers []string, n int, follow, prefix bool) error {
	pre := func(s string) string {
		if prefix {
			return termtext.Line(s) + ": "
		}
		return ""
	}
	if !follow {
		for _, s := range servers {
			lines, err := cl.Logs(ctx, plugin, s, n)
			if err != nil {
				return fmt.Errorf("logs of %s/%s: %w", termtext.Line(plugin), termtext.Line(s), err)
			}
			for _, l := range lines {
				fmt.Fprintln(w, pre(s)+termtext.Line(l))
			}
		}
		return nil
	}
	type line struct{ server, text string }
	merged := make(chan line)
	done := make(chan struct{})
	for _, s := range servers {
		c, err := cl.Follow(ctx, plugin, s, n)
		if err != nil {
			return err
		}
		go func() {
			defer func() { done <- struct{}{} }()
			for l := range c {
				select {
				case merged <- line{s, l}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for open := len(servers); open > 0; {
		select {
		case l := <-merged:
			fmt.Fprintln(w, pre(l.server)+termtext.Line(l.text))
		case <-done:
			open--
		}
	}
	return nil
}
