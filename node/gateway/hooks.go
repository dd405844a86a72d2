package gateway

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolCall is one call as the hooks around it see it.
type ToolCall struct {
	Session string
	// Plugin owns the tool; "" for a tool of the agent's own, which no plugin
	// wrote. Which plugins' hooks see the call is decided from it.
	Plugin string
	Tool   string // the name the caller used (<plugin>__<tool>)
	Args   json.RawMessage
}

// HookRunner runs plugin hooks around the gateway's calls. PreToolUse and
// PostToolUse return a non-empty reason when a hook blocks the call.
type HookRunner interface {
	PreToolUse(ctx context.Context, c ToolCall) string
	PostToolUse(ctx context.Context, c ToolCall, res *mcp.CallToolResult) string
	Session(ctx context.Context, event, session string)
}

// AgentHooksCapability is the experimental client capability by which an MCP
// client says it forwards its own hook events to the node (`oz0-node mcp
// --agent-hooks`, written by `oz0-node setup`): the plugins' hooks then run once,
// for the agent's event, and the gateway does not fire PreToolUse, PostToolUse,
// SessionStart or SessionEnd itself for that client.
const AgentHooksCapability = "ai.oz0/agent-hooks"

// forwardsHooks reports whether the caller of a session forwards its hooks.
func forwardsHooks(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	_, ok := ip.Capabilities.Experimental[AgentHooksCapability]
	return ok
}
