package main

import (
	"context"
	"encoding/json"
	"fmt"

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
		Long: `A stdio bridge to the running node's MCP endpoint (<data>/run/mcp.sock), so any MCP
client can use the node's tools, e.g.:

  claude mcp add oz0 -- oz0-node mcp

Messages are relayed as they are, both ways; the node does the rest. With
--agent-hooks (the entry oz0-node setup writes) the client forwards its own hook
events through oz0-node hook, so the node does not fire the plugins' PreToolUse,
PostToolUse, SessionStart and SessionEnd hooks a second time for its calls.`,
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
			var edit func(jsonrpc.Message) jsonrpc.Message
			if agentHooks {
				edit = markAgentHooks
			}
			return relay(ctx, cancel, down, up, edit)
		},
	}
	c.Flags().BoolVar(&agentHooks, "agent-hooks", false, "the client forwards its hook events (oz0-node hook): the node fires no hooks itself for its calls")
	return c
}

// markAgentHooks adds the agent-hooks capability to the client's initialize
// request; every other message passes unchanged.
func markAgentHooks(msg jsonrpc.Message) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "initialize" {
		return msg
	}
	var params map[string]any
	if json.Unmarshal(req.Params, &params) != nil || params == nil {
		return msg
	}
	caps, _ := params["capabilities"].(map[string]any)
	if caps == nil {
		caps = map[string]any{}
	}
	exp, _ := caps["experimental"].(map[string]any)
	if exp == nil {
		exp = map[string]any{}
	}
	exp[gateway.AgentHooksCapability] = map[string]any{}
	caps["experimental"] = exp
	params["capabilities"] = caps
	b, err := json.Marshal(params)
	if err != nil {
		return msg
	}
	out := *req
	out.Params = b
	return &out
}

// relay copies JSON-RPC messages between two connections until either ends;
// edit, when set, may change what a sends to b.
func relay(ctx context.Context, cancel context.CancelFunc, a, b mcp.Connection, edit func(jsonrpc.Message) jsonrpc.Message) error {
	errc := make(chan error, 2)
	pump := func(from, to mcp.Connection, edit func(jsonrpc.Message) jsonrpc.Message) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- err
				return
			}
			if edit != nil {
				msg = edit(msg)
			}
			if err := to.Write(ctx, msg); err != nil {
				errc <- err
				return
			}
		}
	}
	go pump(a, b, edit)
	go pump(b, a, nil)
	err := <-errc
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	return err
}
