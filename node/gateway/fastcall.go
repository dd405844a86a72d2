package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"
)

// RawBackend carries a tools/call to a server as bytes: the node's own stdio
// transport. The SDK decodes each message into its types and encodes it again on
// both sides of the node, which cost most of a call's time (docs/performance.md,
// "The gateway against its peers"); a call through a RawBackend is forwarded
// with only the changes the node makes to it.
type RawBackend interface {
	// CallTool sends one tools/call whose params are the JSON object given and
	// returns the server's answer; an error means it gave none.
	CallTool(ctx context.Context, params []byte) (*jsonrpc.Response, error)
}

// HookPresence is implemented by a HookRunner that can say, before a call,
// whether any hook at all is installed for an event; calls that meet none take
// the fast path.
type HookPresence interface {
	AnyHookFor(event string) bool
}

// FastCall is a tools/call the gateway answers without the SDK's message path.
type FastCall struct {
	g  *Gateway
	ss *mcp.ServerSession
	id jsonrpc.ID
	rt *route
	// p is the call's tool, arguments and _meta (trace context), decoded in
	// place: the call and its params are one allocation.
	p     fastParams
	token any // the caller's progress token, if it gave one
	// progressTo takes the call's progress instead of the caller's session
	// (ProgressTo); nil: the session.
	progressTo func(*mcp.ProgressNotificationParams)
	hooks      bool
	// inFlight registers the call while it runs (Run, once).
	inFlight call
}

// fastParams is what a tools/call's params carry; keys match exactly, as they do
// for the SDK.
type fastParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      fastMeta        `json:"_meta"`
}

// fastMeta is a call's _meta. Decoded as a plain map, the JSON library makes it
// with room for 64 keys (5 KB, half of what a stdio fast call allocated); a
// request's _meta holds a few.
type fastMeta map[string]json.RawMessage

func (m *fastMeta) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*m = nil
		return nil
	}
	mm := make(map[string]json.RawMessage, 4)
	if !decodes(b, &mm) {
		return fmt.Errorf("_meta is not an object: %.40s", b)
	}
	*m = mm
	return nil
}

// Fast returns the fast path for a caller's request, or false when the request
// must take the SDK's path: it is not a tools/call, its session is not
// initialised, its tool is not served by a running server with a RawBackend, or
// a PreToolUse hook is installed. Everything the node does to a call happens on
// both paths: the policy is asked again, hooks run, progress is re-tokened, the
// call counts in metrics and ends with its session.
func (g *Gateway) Fast(ss *mcp.ServerSession, req *jsonrpc.Request) (*FastCall, bool) {
	if req.Method != "tools/call" || !req.ID.IsValid() || ss == nil || ss.InitializeParams() == nil {
		return nil, false
	}
	fc := &FastCall{g: g, ss: ss, id: req.ID}
	p := &fc.p
	rest, err := sjson.Parse(req.Params, p, sjson.DontMatchCaseInsensitiveStructFields)
	if err != nil || len(bytes.TrimSpace(rest)) != 0 {
		return nil, false
	}
	g.mu.RLock()
	rt := g.tools[p.Name]
	g.mu.RUnlock()
	if rt == nil || rt.raw == nil {
		return nil, false
	}
	hooks := g.opts.Hooks != nil && !g.forwardsHooks(ss, fastCaps(ss, p.Meta))
	if hooks {
		hp, ok := g.opts.Hooks.(HookPresence)
		if !ok || hp.AnyHookFor("PreToolUse") {
			return nil, false
		}
	}
	if sdkRefusesMeta(p.Meta, ss.ID() != "") {
		return nil, false
	}
	fc.rt, fc.hooks = rt, hooks
	if tok, ok := p.Meta["progressToken"]; ok {
		if err := json.Unmarshal(tok, &fc.token); err != nil {
			return nil, false
		}
		switch fc.token.(type) {
		case string, float64:
		default:
			return nil, false // not a token the SDK would take either
		}
	}
	return fc, true
}

// PerRequestProtocol is the first protocol version whose requests carry their
// own version, client info and capabilities in _meta.
const PerRequestProtocol = "2026-07-28"

// sdkRefusesMeta reports whether the SDK would refuse a call for the protocol
// keys of its _meta, so that it must take the SDK's path to be refused: a
// per-request protocol version the server does not speak, client info or
// capabilities that do not decode, or any per-request version at all (a
// non-empty string) on a session of the Streamable HTTP door (stateful, which
// refuses them).
func sdkRefusesMeta(meta map[string]json.RawMessage, stateful bool) bool {
	raw, ok := meta[mcp.MetaKeyProtocolVersion]
	if !ok {
		return false
	}
	var pv string
	if sjson.Unmarshal(raw, &pv) != nil || pv == "" {
		return false // not a per-request version: the SDK ignores it too
	}
	if stateful {
		return true // the SDK's stateful handler refuses any version given so
	}
	if pv < PerRequestProtocol {
		return false
	}
	if !slices.Contains(mcp.SupportedProtocolVersions(), pv) {
		return true
	}
	if ci, ok := meta[mcp.MetaKeyClientInfo]; ok {
		var info mcp.Implementation
		if isNull(ci) || !decodes(ci, &info) {
			return true
		}
	}
	// The shape the SDK decodes a request's capabilities into.
	var caps struct {
		mcp.ClientCapabilities
		//lint:ignore SA1019 the SDK still decodes roots into this type
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	c, ok := meta[mcp.MetaKeyClientCapabilities]
	return !ok || isNull(c) || !decodes(c, &caps)
}

// fastCaps are the capabilities that hold for a call on the fast path: its own
// under the per-request protocol, else its session's (as callCaps).
func fastCaps(ss *mcp.ServerSession, meta map[string]json.RawMessage) *mcp.ClientCapabilities {
	var pv string
	if raw, ok := meta[mcp.MetaKeyProtocolVersion]; !ok || sjson.Unmarshal(raw, &pv) != nil || pv < PerRequestProtocol {
		return sessionCaps(ss)
	}
	// Only the experimental capabilities are read: the SDK judges the rest.
	var caps struct {
		Experimental map[string]any `json:"experimental"`
	}
	if raw, ok := meta[mcp.MetaKeyClientCapabilities]; !ok || sjson.Unmarshal(raw, &caps) != nil {
		return nil
	}
	return &mcp.ClientCapabilities{Experimental: caps.Experimental}
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func decodes(b json.RawMessage, v any) bool {
	rest, err := sjson.Parse(b, v, sjson.DontMatchCaseInsensitiveStructFields)
	return err == nil && len(bytes.TrimSpace(rest)) == 0
}

// WantsProgress reports whether the caller asked for the call's progress.
func (fc *FastCall) WantsProgress() bool { return fc.token != nil }

// ProgressTo hands the call's progress, under the caller's token, to send
// instead of to the caller's session: a door that answers the call on a stream
// of its own puts the progress there, ahead of the answer. send must ignore a
// call after Run has returned: a server whose connection cannot order its
// progress (none of the node's) may send it late.
func (fc *FastCall) ProgressTo(send func(*mcp.ProgressNotificationParams)) { fc.progressTo = send }

// Run makes the call and returns its answer for the caller; nil when the caller
// cancelled it or its session ended, when no answer is due. A FastCall runs
// once.
func (fc *FastCall) Run(ctx context.Context) *jsonrpc.Response {
	g, rt := fc.g, fc.rt
	start := time.Now()
	// The call ends when its caller cancels it, and with its session: one with
	// an id (HTTP) can be ended by its client apart from its connection; a stdio
	// caller's calls end with the context given.
	ctx = g.startCall(ctx, &fc.inFlight, fc.ss.ID(), fc.ss, fc.id)
	defer g.endCall(&fc.inFlight)

	var rec *CallRecord
	if g.opts.Observe != nil {
		rec = newRecord(fc.ss, "fast", rt, fc.p.Name, fc.p.Arguments, start)
		switch v := fc.id.Raw().(type) {
		case int64:
			rec.RequestID = strconv.FormatInt(v, 10) // as fmt.Sprint writes it
		case string:
			rec.RequestID = v
		default:
			rec.RequestID = fmt.Sprint(v)
		}
		rec.traceFromRaw(fc.p.Meta)
		defer g.observe(rec)
	}
	res, outcome := fc.call(ctx, rec)
	if g.opts.OnCall != nil {
		g.opts.OnCall(rt.plugin, outcome, time.Since(start))
	}
	if ctx.Err() != nil {
		return nil
	}
	return &jsonrpc.Response{ID: fc.id, Result: res}
}

func (fc *FastCall) call(ctx context.Context, rec *CallRecord) (json.RawMessage, string) {
	g, rt := fc.g, fc.rt
	if g.opts.Check != nil {
		v := g.opts.Check(ctx, Call{Plugin: rt.plugin, Server: rt.server, Tool: fc.p.Name, Annotations: rt.def.Annotations})
		if !v.OK {
			rec.decided(DecisionDeny, v.Reason)
			return rawResult(errorResult("refused: " + v.Reason)), "refused"
		}
		rec.decided(DecisionAllow, v.Reason)
	} else {
		rec.decided(DecisionAllow, "")
	}
	args := callArgs(fc.p.Arguments)
	if bytes.ContainsAny(args, "\r\n") {
		// A line break can only be whitespace between tokens here, and would end
		// the call's line in the server's reader: what follows it would reach the
		// server as a message of the caller's own making. The SDK's path sends
		// arguments compact; so does this one.
		var b bytes.Buffer
		if err := json.Compact(&b, args); err != nil {
			return rawResult(rt.failed(fmt.Errorf("arguments: %w", err))), "error"
		}
		args = b.Bytes()
	}
	params := make([]byte, 0, len(args)+len(rt.tool)+96)
	params = append(params, `{"name":`...)
	params = appendJSONString(params, rt.tool)
	params = append(params, `,"arguments":`...)
	params = append(params, args...)
	if fc.token != nil {
		// The server gets a token of its own for this call, never the caller's.
		own, done := g.progressFor(ctx, rt, fc.ss, fc.token, fc.progressTo)
		defer done()
		params = append(params, `,"_meta":{"progressToken":`...)
		params = appendJSONString(params, own)
		params = append(params, '}')
	}
	params = append(params, '}')

	cctx, dl := g.deadline(ctx, rt)
	resp, err := rt.raw.CallTool(cctx, params)
	err = dl.finish(err)
	rec.answeredRaw(ctx, resp, err)
	if err == nil && resp.Error != nil {
		err = fmt.Errorf("calling %q: %w", "tools/call", resp.Error)
	}
	if err == nil && (len(resp.Result) == 0 || resp.Result[0] != '{') {
		err = errors.New("the server's result is not an object")
	}
	if err == nil && (bytes.IndexByte(resp.Result, '\r') >= 0 || !utf8.Valid(resp.Result)) {
		resp.Result, err = normalize(resp.Result)
	}
	if err != nil {
		return rawResult(rt.failed(err)), "error"
	}
	outcome := "ok"
	if isErrorResult(resp.Result) {
		outcome = "error"
	}
	// A PostToolUse hook installed while the call ran still sees its result.
	if hp, ok := g.opts.Hooks.(HookPresence); fc.hooks && ok && hp.AnyHookFor("PostToolUse") {
		var res mcp.CallToolResult
		if err := json.Unmarshal(resp.Result, &res); err != nil {
			return rawResult(rt.failed(err)), "error"
		}
		call := ToolCall{Session: sessionID(fc.ss), Plugin: rt.plugin, Tool: fc.p.Name, Args: args}
		if block := g.opts.Hooks.PostToolUse(ctx, call, &res); block != "" {
			rec.decided(DecisionBlock, "PostToolUse hook: "+block)
			return rawResult(errorResult("blocked by a PostToolUse hook: " + block)), "blocked"
		}
		// The caller gets the result as the hook saw it, as on the SDK's path:
		// the server's bytes may hold more (a duplicate key, a key of no
		// field) that the hook's decoding dropped.
		b, err := json.Marshal(&res)
		if err != nil {
			return rawResult(rt.failed(err)), "error"
		}
		return b, outcome
	}
	return resp.Result, outcome
}

// normalize makes a server's result fit a caller's line as the SDK's path
// would send it. A carriage return can only be whitespace between tokens; a
// caller whose reader ends lines at one would read what follows it as a message
// of its own. Bytes that are no UTF-8 would fail a strict reader on the whole
// line; they become U+FFFD, as the SDK's encoding makes them.
func normalize(r json.RawMessage) (json.RawMessage, error) {
	if utf8.Valid(r) {
		var b bytes.Buffer
		err := json.Compact(&b, r)
		return b.Bytes(), err
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// isErrorResult reports whether a tool result says isError: true at its top
// level (for metrics only: a nested key may be taken for it).
func isErrorResult(r json.RawMessage) bool {
	return bytes.Contains(r, []byte(`"isError":true`)) || bytes.Contains(r, []byte(`"isError": true`))
}

func rawResult(r *mcp.CallToolResult) json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		// A result of our own making always encodes.
		panic(fmt.Sprintf("encode a tool error result: %v", err))
	}
	return b
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendResponse appends a response to a caller in the wire form, without
// re-encoding its result (which came from a server as one JSON value).
func AppendResponse(b []byte, r *jsonrpc.Response) ([]byte, error) {
	if r.Error != nil || len(r.Result) == 0 {
		return nil, errors.New("not a result")
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	switch v := r.ID.Raw().(type) {
	case int64:
		b = strconv.AppendInt(b, v, 10)
	case string:
		b = appendJSONString(b, v)
	default:
		return nil, fmt.Errorf("response id %v is neither a number nor a string", v)
	}
	b = append(b, `,"result":`...)
	b = append(b, r.Result...)
	return append(b, '}'), nil
}
