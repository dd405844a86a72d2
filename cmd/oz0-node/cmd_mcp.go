package main

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

func newMCPCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the node's tools over stdio MCP (for any MCP client to launch)",
		Long: `A stdio bridge to the running node's MCP endpoint (<data>/run/mcp.sock), so any MCP
client can use the node's tools, e.g.:

  claude mcp add oz0 -- oz0-node mcp

Messages are relayed as they are, both ways; the node does the rest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			up, err := mcpTransport(d).Connect(ctx)
			if err != nil {
				return fmt.Errorf("connect to the node's MCP endpoint %s (is the node running?): %w", d.MCP(), err)
			}
			defer up.Close()
			down, err := (&mcp.StdioTransport{}).Connect(ctx)
			if err != nil {
				return fmt.Errorf("stdio: %w", err)
			}
			defer down.Close()
			return relay(ctx, cancel, down, up)
		},
	}
}

// relay copies JSON-RPC messages between two connections until either ends.
func relay(ctx context.Context, cancel context.CancelFunc, a, b mcp.Connection) error {
	errc := make(chan error, 2)
	pump := func(from, to mcp.Connection) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			if err := to.Write(ctx, msg); err != nil {
				errc <- err
				return
			}
		}
	}
	go pump(a, b)
	go pump(b, a)
	err := <-errc
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
