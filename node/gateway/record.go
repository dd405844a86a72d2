package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the gateway decided about a call.
const (
	DecisionAllow = "allow" // checked and forwarded to the server
	DecisionDeny  = "deny"  // refused by the policy, a tenant's rule or an operator
	DecisionBlock = "block" // a hook blocked it
)

// CallRecord is one tools/call routed to a plugin's server, as Options.Observe
// sees it once answered: on the fast path and the SDK's alike.
type CallRecord struct {
	Door string // stdio or http
	Path string // fast or sdk
	// Session names the caller's session; SessionID is its Streamable HTTP id
	// ("" on the stdio door).
	Session, SessionID string
	// RequestID is the JSON-RPC id of the call (the fast path's; the SDK's path
	// does not give it).
	RequestID string
	Protocol  string // the caller session's MCP protocol version
	Plugin    string
	Server    string
	Tool      string // <plugin>__<tool>

	Decision string // DecisionAllow, DecisionDeny or DecisionBlock
	Reason   string // what refused or blocked it
	// Outcome of an allowed call: ok, tool-error, rpc-error (RPCError its
	// code), no-answer or cancelled.
	Outcome     string
	RPCError    int64
	ResultBytes int

	// Args are the call's arguments as the caller sent them: for a digest, never
	// to be kept.
	Args json.RawMessage
	// TraceParent and TraceState are the W3C trace context the caller put in
	// the call's _meta, if any.
	TraceParent, TraceState string

	Start time.Time
	Took  time.Duration
}

// door is the door a session came in by: the stdio framing has no session id,
// Streamable HTTP always has one.
func door(ss *mcp.ServerSession) (string, string) {
	if ss == nil || ss.ID() == "" {
		return "stdio", ""
	}
	return "http", ss.ID()
}

func newRecord(ss *mcp.ServerSession, path string, rt *route, name string, args json.RawMessage, start time.Time) *CallRecord {
	r := &CallRecord{Path: path, Session: sessionID(ss), Plugin: rt.plugin, Server: rt.server, Tool: name, Args: args, Start: start}
	r.Door, r.SessionID = door(ss)
	if ss != nil {
		if ip := ss.InitializeParams(); ip != nil {
			r.Protocol = ip.ProtocolVersion
		}
	}
	return r
}

// fromHTTP corrects the door of a call the SDK's path took from what its
// request carried: a sessionless HTTP request (PerRequestProtocol) has
// no session id, like the stdio framing, but it has headers.
func (r *CallRecord) fromHTTP(x *mcp.RequestExtra) {
	if x == nil || x.Header == nil {
		return
	}
	r.Door = "http"
	if r.Protocol == "" {
		r.Protocol = x.Header.Get("Mcp-Protocol-Version")
	}
}

func (g *Gateway) observe(r *CallRecord) {
	r.Took = time.Since(r.Start)
	g.opts.Observe(r)
}

// The methods below do nothing on a nil record: no observer, no cost.

func (r *CallRecord) decided(decision, reason string) {
	if r != nil {
		r.Decision, r.Reason = decision, reason
	}
}

// answered takes the outcome of a call on the SDK's path.
func (r *CallRecord) answered(ctx context.Context, res *mcp.CallToolResult, err error) {
	if r == nil {
		return
	}
	if err != nil {
		r.failed(ctx, err)
		return
	}
	r.Outcome = "ok"
	if res != nil && res.IsError {
		r.Outcome = "tool-error"
	}
	if b, err := json.Marshal(res); err == nil {
		r.ResultBytes = len(b)
	}
}

// answeredRaw takes the outcome of a call on the fast path.
func (r *CallRecord) answeredRaw(ctx context.Context, resp *jsonrpc.Response, err error) {
	if r == nil {
		return
	}
	switch {
	case err != nil:
		r.failed(ctx, err)
	case resp.Error != nil:
		r.failed(ctx, resp.Error)
	default:
		r.Outcome, r.ResultBytes = "ok", len(resp.Result)
		if isErrorResult(resp.Result) {
			r.Outcome = "tool-error"
		}
	}
}

func (r *CallRecord) failed(ctx context.Context, err error) {
	var we *jsonrpc.Error
	switch {
	case ctx.Err() != nil:
		r.Outcome = "cancelled"
	case errors.As(err, &we):
		r.Outcome, r.RPCError = "rpc-error", we.Code
	default:
		r.Outcome = "no-answer"
	}
}

// traceFrom takes the trace context from a call's _meta (the SDK's path).
func (r *CallRecord) traceFrom(meta mcp.Meta) {
	if r == nil || meta == nil {
		return
	}
	r.TraceParent, _ = meta["traceparent"].(string)
	r.TraceState, _ = meta["tracestate"].(string)
}

// traceFromRaw takes the trace context from a call's _meta (the fast path's).
func (r *CallRecord) traceFromRaw(meta map[string]json.RawMessage) {
	if r == nil || meta == nil {
		return
	}
	if raw, ok := meta["traceparent"]; ok {
		json.Unmarshal(raw, &r.TraceParent)
	}
	if raw, ok := meta["tracestate"]; ok {
		json.Unmarshal(raw, &r.TraceState)
	}
}
