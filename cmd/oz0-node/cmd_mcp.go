package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"oz0.ai/node/node/gateway"
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
does the rest (one session per bridge). With --agent-hooks (the entry oz0-node
setup writes) the client forwards its own hook events through oz0-node hook, so
the node does not fire the plugins' PreToolUse, PostToolUse, SessionStart and
SessionEnd hooks a second time for its calls.`,
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
			var edit func(jsonrpc.Message) jsonrpc.Message
			if agentHooks {
				edit = markAgentHooks
			}
			return pump(cmd.Context(), conn.(*net.UnixConn), os.Stdin, os.Stdout, edit)
		},
	}
	c.Flags().BoolVar(&agentHooks, "agent-hooks", false, "the client forwards its hook events (oz0-node hook): the node fires no hooks itself for its calls")
	return c
}

// pump copies bytes between the client (in, out) and the node's stdio endpoint
// until either ends: each side's messages go on as they come, so any number of
// calls are in flight at once. edit, when set, may change the client's
// messages until it has changed one; after that the bytes flow untouched. The client closing its
// input is a clean end: the node is told (its half of the socket closes) and
// its last answers are passed on.
func pump(ctx context.Context, node *net.UnixConn, in io.Reader, out io.Writer, edit func(jsonrpc.Message) jsonrpc.Message) error {
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
		br := bufio.NewReaderSize(in, 64<<10)
		if edit != nil {
			if err := editFirst(br, node, edit); err != nil {
				up <- err
				return
			}
		}
		_, err := io.Copy(node, br)
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

// editFirst passes the client's lines to w, each through edit, until edit has
// changed one (the request that declares the client's capabilities, which the
// node takes from the session's first). Lines that are no message pass as they
// are: the node answers them. Lines that are no message pass as they are: the node
// answers them.
func editFirst(r *bufio.Reader, w io.Writer, edit func(jsonrpc.Message) jsonrpc.Message) error {
	for {
		line, err := r.ReadBytes('\n')
		done := false
		if msg, derr := jsonrpc.DecodeMessage(bytes.TrimSpace(line)); derr == nil {
			if out := edit(msg); out != msg {
				if b, eerr := jsonrpc.EncodeMessage(out); eerr == nil {
					line, done = append(b, '\n'), true
				}
			}
		}
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
		}
		if err != nil || done {
			return err
		}
	}
}

// markAgentHooks adds the agent-hooks capability where the client declares its
// capabilities: the params of its initialize request, or, for a client of the
// sessionless protocol, the capabilities in a request's _meta. Every other
// message passes unchanged.
func markAgentHooks(msg jsonrpc.Message) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return msg
	}
	var params map[string]any
	if json.Unmarshal(req.Params, &params) != nil || params == nil {
		return msg
	}
	var caps map[string]any
	if req.Method == "initialize" {
		caps, _ = params["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		params["capabilities"] = caps
	} else {
		meta, _ := params["_meta"].(map[string]any)
		if meta == nil || meta[mcp.MetaKeyProtocolVersion] == nil {
			return msg
		}
		caps, _ = meta[mcp.MetaKeyClientCapabilities].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		meta[mcp.MetaKeyClientCapabilities] = caps
	}
	exp, _ := caps["experimental"].(map[string]any)
	if exp == nil {
		exp = map[string]any{}
	}
	exp[gateway.AgentHooksCapability] = map[string]any{}
	caps["experimental"] = exp
	b, err := json.Marshal(params)
	if err != nil {
		return msg
	}
	out := *req
	out.Params = b
	return &out
}
