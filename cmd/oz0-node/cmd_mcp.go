package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/daemon"
)

func newMCPCmd(g *globals) *cobra.Command {
	var agentHooks bool
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the node's tools over stdio MCP (for any MCP client to launch)",
		Long: `A stdio bridge to the running node's MCP endpoint (<data>/run/mcp-stdio.sock), so
any MCP client can use the node's tools, e.g.:

  claude mcp add oz0 -- oz0-node mcp

Bytes are relayed as they are, both ways, calls in flight side by side; the node
does the rest (one session per bridge), whatever MCP protocol revision the client
speaks. With --agent-hooks (the entry oz0-node setup writes) the client forwards its
own hook events through oz0-node hook: the bridge tells the node so for the whole
connection, and the node does not fire the plugins' PreToolUse, PostToolUse,
SessionStart and SessionEnd hooks a second time for any of its calls.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			var dl net.Dialer
			conn, err := dl.DialContext(cmd.Context(), "unix", d.MCPStdio())
			if err != nil {
				return fmt.Errorf("connect to the node's MCP endpoint %s (is the node running?): %w", d.MCPStdio(), err)
			}
			return pump(cmd.Context(), conn.(*net.UnixConn), os.Stdin, os.Stdout, agentHooks)
		},
	}
	c.Flags().BoolVar(&agentHooks, "agent-hooks", false, "the client forwards its hook events (oz0-node hook): the node fires no hooks itself for its calls")
	return c
}

// pump copies bytes between the client (in, out) and the node's stdio endpoint
// until either ends: each side's messages go on as they come, so any number of
// calls are in flight at once. With agentHooks the node is first told that the
// connection's client forwards its hooks (daemon.AgentHooksPreamble); the
// client's bytes then flow untouched. The client closing its input is a clean
// end: the node is told (its half of the socket closes) and its last answers are
// passed on.
func pump(ctx context.Context, node *net.UnixConn, in io.Reader, out io.Writer, agentHooks bool) error {
	defer node.Close()
	stop := context.AfterFunc(ctx, func() { node.Close() })
	defer stop()
	down := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, node)
		down <- err
	}()
	up := make(chan error, 1)
	go func() {
		if agentHooks {
			if _, err := io.WriteString(node, daemon.AgentHooksPreamble+"\n"); err != nil {
				up <- err
				return
			}
		}
		_, err := io.Copy(node, in)
		up <- err
	}()
	select {
	case err := <-down:
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("from the node: %w", err)
		}
		return errors.New("the node ended the session (stopped or restarted)")
	case err := <-up:
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("to the node: %w", err)
		}
		node.CloseWrite()
		select {
		case <-down:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		return nil
	}
}
