package gateway

import (
	"context"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inFlight are the calls in flight, each registered once under the one context
// of its own it runs with: ending a caller's session ends its calls (the SDK's
// session close waits for them), and a caller's notifications/cancelled ends
// the fast call it names (the SDK knows nothing of those). One flat map: a
// call costs one insert and one delete, and nothing is left to free when a
// session ends; ending one looks through the calls in flight.
type inFlight struct {
	mu  sync.Mutex
	m   map[callKey]*call
	seq uint64 // the last number given to a call no cancellation names
}

// callKey is one call in flight. sid is its caller session's Streamable HTTP
// id, which EndSession names (a stdio caller's fast calls have "": they end
// with their connection). A fast call is found by its caller's session and
// request id (ss, id), which the caller's cancellation names; a call of the
// SDK's path (whose cancellation is the SDK's), or a fast call whose id a later
// one took, by a number of its own (seq).
type callKey struct {
	sid string
	ss  *mcp.ServerSession
	id  jsonrpc.ID
	seq uint64
}

// call is one call in flight; key is where it is registered now.
type call struct {
	key    callKey
	cancel context.CancelCauseFunc
}

// startCall registers c, a call of the caller session whose HTTP id is sid,
// and returns the context it runs under. A fast call gives its caller's session
// and request id; one of the SDK's path the zero ID. endCall forgets it.
func (g *Gateway) startCall(ctx context.Context, c *call, sid string, ss *mcp.ServerSession, id jsonrpc.ID) context.Context {
	ctx, c.cancel = context.WithCancelCause(ctx)
	f := &g.inFlight
	f.mu.Lock()
	if f.m == nil {
		f.m = map[callKey]*call{}
	}
	if !id.IsValid() {
		c.key = f.numbered(sid)
	} else {
		c.key = callKey{sid: sid, ss: ss, id: id}
		// A caller's cancellation names the latest call under an id; an
		// earlier one still in flight ends only with its session.
		if old := f.m[c.key]; old != nil {
			old.key = f.numbered(sid)
			f.m[old.key] = old
		}
	}
	f.m[c.key] = c
	f.mu.Unlock()
	return ctx
}

func (f *inFlight) numbered(sid string) callKey {
	f.seq++
	return callKey{sid: sid, seq: f.seq}
}

// endCall ends a call's context and forgets it.
func (g *Gateway) endCall(c *call) {
	c.cancel(nil)
	g.inFlight.mu.Lock()
	delete(g.inFlight.m, c.key)
	g.inFlight.mu.Unlock()
}

// cancelFast ends the fast call a caller's cancellation names, if it is one.
func (g *Gateway) cancelFast(ss *mcp.ServerSession, p *mcp.CancelledParams) {
	if p == nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	g.inFlight.mu.Lock()
	c := g.inFlight.m[callKey{sid: ss.ID(), ss: ss, id: id}]
	g.inFlight.mu.Unlock()
	if c != nil {
		c.cancel(nil)
	}
}

// EndSession ends the calls in flight of the MCP session id: its client has
// closed it and waits for the answer to that.
func (g *Gateway) EndSession(id string) {
	// The session takes no fast call from now on: it leaves the SDK's keeping
	// a moment later, when its connection has closed.
	g.mu.Lock()
	delete(g.byID, id)
	g.mu.Unlock()
	if id == "" {
		return // no session: the stdio door's calls end with their connection
	}
	cause := errors.New("the MCP session was closed by its client")
	g.inFlight.mu.Lock()
	for k, c := range g.inFlight.m {
		if k.sid == id {
			c.cancel(cause)
		}
	}
	g.inFlight.mu.Unlock()
}
