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
// client says it forwards its own hook events to the node (`oz0-node hook`): the
// plugins' hooks then run once, for the agent's event, and the gateway does not
// fire PreToolUse, PostToolUse, SessionStart or SessionEnd itself for that
// client's calls. A client declares it where it declares its capabilities: in
// initialize for a session of the older protocol revisions, in every request's
// _meta under the sessionless revision (PerRequestProtocol). The stdio bridge
// (`oz0-node mcp --agent-hooks`) says it for its whole connection instead
// (MarkAgentHooks), whatever its client declares.
const AgentHooksCapability = "ai.oz0/agent-hooks"

// MarkAgentHooks records that every request of a caller session comes from a
// client that forwards its hooks: a door that knows it of the whole connection
// (the stdio bridge's) says so before the session's first message is handled.
// The returned func forgets it; call it when the session has ended.
func (g *Gateway) MarkAgentHooks(ss *mcp.ServerSession) (forget func()) {
	g.mu.Lock()
	if g.agentHooks == nil {
		g.agentHooks = map[*mcp.ServerSession]struct{}{}
	}
	g.agentHooks[ss] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.agentHooks, ss)
		g.mu.Unlock()
	}
}

// forwardsHooks reports whether the caller of a request forwards its hooks: its
// connection was marked so by its door, or the capabilities that hold for the
// request say so. caps are the request's own capabilities when it carries them
// (the sessionless revision: every request declares them, and a session's first
// request, which the SDK keeps as its parameters, speaks for no other), else the
// session's from initialize.
func (g *Gateway) forwardsHooks(ss *mcp.ServerSession, caps *mcp.ClientCapabilities) bool {
	if ss != nil {
		g.mu.RLock()
		_, marked := g.agentHooks[ss]
		g.mu.RUnlock()
		if marked {
			return true
		}
	}
	if caps == nil {
		return false
	}
	_, ok := caps.Experimental[AgentHooksCapability]
	return ok
}

// callCaps are the capabilities that hold for a tools/call on the SDK's path.
func callCaps(req *mcp.CallToolRequest) *mcp.ClientCapabilities {
	if v, _ := req.Params.GetMeta()[mcp.MetaKeyProtocolVersion].(string); v >= PerRequestProtocol {
		return req.ClientCapabilities()
	}
	return sessionCaps(req.Session)
}

// sessionCaps are the capabilities a session's client declared when it began.
func sessionCaps(ss *mcp.ServerSession) *mcp.ClientCapabilities {
	if ss == nil {
		return nil
	}
	if ip := ss.InitializeParams(); ip != nil {
		return ip.Capabilities
	}
	return nil
}
