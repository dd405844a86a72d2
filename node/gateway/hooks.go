package gateway

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HookRunner runs plugin hooks around the gateway's calls. PreToolUse and
// PostToolUse return a non-empty reason when a hook blocks the call.
type HookRunner interface {
	PreToolUse(ctx context.Context, session, tool string, args any) string
	PostToolUse(ctx context.Context, session, tool string, args any, res *mcp.CallToolResult) string
	Session(ctx context.Context, event, session string)
}
