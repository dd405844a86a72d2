package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"oz0.ai/node/node/mcpdoor"
)

func newMCPCmd(g *globals) *cobra.Command {
	var agentHooks, relay bool
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the node's tools over stdio MCP (for any MCP client to launch)",
		Long: `A stdio bridge to the running node's MCP endpoint (<data>/run/mcp-stdio.sock), so
any MCP client can use the node's tools, e.g.:

  claude mcp add oz0 -- oz0-node mcp

The bridge hands its stdin and stdout to the node, which then reads and writes
the client's pipes itself (one session per bridge), whatever MCP protocol revision
the client speaks; the bridge waits and exits when the session ends. Where the
node cannot take them (another system, a terminal rather than pipes) the bridge
relays the bytes as they are, both ways, calls in flight side by side. With
--agent-hooks (the entry oz0-node setup writes) the client forwards its own hook
events through oz0-node hook: the bridge tells the node so for the whole
connection, and the node does not fire the plugins' PreToolUse, PostToolUse,
SessionStart and SessionEnd hooks a second time for any of its calls.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			dial := func() (*net.UnixConn, error) {
				var dl net.Dialer
				conn, err := dl.DialContext(cmd.Context(), "unix", d.MCPStdio())
				if err != nil {
					return nil, fmt.Errorf("connect to the node's MCP endpoint %s (is the node running?): %w", d.MCPStdio(), err)
				}
				return conn.(*net.UnixConn), nil
			}
			conn, err := dial()
			if err != nil {
				return err
			}
			if !relay {
				handed, err := handOff(cmd.Context(), conn, agentHooks)
				if handed {
					return err
				}
				// Refused (an older node, pipes it cannot take): the handoff
				// request was its session's first line, so relay on a new one.
				conn.Close()
				if conn, err = dial(); err != nil {
					return err
				}
			}
			// The relay is two blocking copies: one thread and no scheduler
			// between them suit a process that only moves bytes.
			runtime.GOMAXPROCS(1)
			return pump(cmd.Context(), blockingConn(conn), os.Stdin, os.Stdout, agentHooks)
		},
	}
	c.Flags().BoolVar(&agentHooks, "agent-hooks", false, "the client forwards its hook events (oz0-node hook): the node fires no hooks itself for its calls")
	c.Flags().BoolVar(&relay, "relay", false, "relay the bytes instead of handing stdin and stdout to the node")
	c.Flags().MarkHidden("relay")
	return c
}

// nodeConn is the bridge's connection to the node's stdio endpoint.
type nodeConn interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// errNodeEnded says the node ended the session (it stopped, restarted or closed
// the session over a cap).
var errNodeEnded = errors.New("the node ended the session (stopped or restarted)")

// pump copies bytes between the client (in, out) and the node's stdio endpoint
// until either ends: each side's messages go on as they come, so any number of
// calls are in flight at once. With agentHooks the node is first told that the
// connection's client forwards its hooks (mcpdoor.AgentHooksPreamble); the
// client's bytes then flow untouched. The client closing its input is a clean
// end: the node is told (its half of the socket closes) and its last answers are
// passed on.
func pump(ctx context.Context, node nodeConn, in io.Reader, out io.Writer, agentHooks bool) error {
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
			if _, err := io.WriteString(node, mcpdoor.AgentHooksPreamble+"\n"); err != nil {
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
		return errNodeEnded
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
