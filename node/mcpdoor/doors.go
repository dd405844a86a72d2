// Package mcpdoor holds the doors MCP clients reach the node's gateway by: the
// stdio socket `oz0-node mcp` connects to (its bytes relayed, or the client's
// own pipes handed over) and Streamable HTTP with its fast path, each session
// under the caps on how many a client and all of them hold open. What a call
// meets behind a door (tool rules, approvals, audit, tracing, hooks) is the
// gateway's, as the daemon built it: every door hands calls to that one gateway.
package mcpdoor

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/metrics"
)

// Options wires the doors.
type Options struct {
	Logger  *slog.Logger
	Gateway *gateway.Gateway
	// SessionCap and SessionCapPerClient bound the sessions open on every door,
	// in total and per client (both > 0).
	SessionCap, SessionCapPerClient int
	// SessionIdle closes an HTTP session that has had no request for this long.
	SessionIdle time.Duration
	// Caps counts the open sessions and those closed over a cap; Raise reports
	// a cap reached (nil: not reported).
	Caps  *metrics.Caps
	Raise func(api.Finding)
}

// Doors are the node's MCP doors over one gateway.
type Doors struct {
	log      *slog.Logger
	gw       *gateway.Gateway
	idle     time.Duration
	sessions *sessionCaps
	caps     *metrics.Caps
}

// New builds the doors; nothing is served until ServeStdio, HTTP and Run.
func New(o Options) *Doors {
	d := &Doors{log: o.Logger, gw: o.Gateway, idle: o.SessionIdle, caps: o.Caps}
	if d.log == nil {
		d.log = slog.Default()
	}
	live := func() map[string]bool {
		ids := map[string]bool{}
		for ss := range d.gw.Server().Sessions() {
			if id := ss.ID(); id != "" {
				ids[id] = true
			}
		}
		return ids
	}
	end := func(id string) {
		d.gw.EndSession(id) // its calls in flight first: the SDK's close waits for them
		for ss := range d.gw.Server().Sessions() {
			if ss.ID() == id {
				ss.Close()
			}
		}
	}
	d.sessions = newSessionCaps(o.SessionCap, o.SessionCapPerClient, o.Caps, o.Raise, live, end)
	return d
}

// Run forgets the sessions the SDK ended by itself (idle), every 30 seconds
// until ctx ends.
func (d *Doors) Run(ctx context.Context) { d.sessions.run(ctx, 30*time.Second) }

// ServeStdio serves the stdio door on ln (<data>/run/mcp-stdio.sock) until ctx
// ends: each connection is one session, counted under the caps.
func (d *Doors) ServeStdio(ctx context.Context, ln net.Listener) {
	d.serveMCPStdio(ctx, d.sessions.listener(ln))
}

// HTTP is the Streamable HTTP door (the MCP socket, --mcp-listen): the SDK's
// handlers behind the fast path, each session counted under the caps. Its
// server's ConnContext must be peer.WithConn, so that a session knows its
// client. Its sessions live in the handler returned: one handler serves every
// listener of the door.
func (d *Doors) HTTP() http.Handler {
	// Answers come as application/json, not an event stream: cheaper for every
	// caller. A call's progress then travels on the session's GET stream, except
	// on the fast path, which answers a call that asked for progress as an
	// event stream of its own (fastHTTP).
	sessions := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return d.gw.Server() },
		&mcp.StreamableHTTPOptions{Logger: d.log, SessionTimeout: d.idle, JSONResponse: true})
	// A client of the sessionless revision (gateway.PerRequestProtocol) opens no
	// session: each request stands alone, its answer (and a call's progress)
	// in its own response.
	// A caller that goes away ends its request, and with it the call: the
	// request is the call's whole life (else a call of a server that never
	// answers holds the connection and its descriptor for good).
	sessionless := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return d.gw.Server() },
		&mcp.StreamableHTTPOptions{Logger: d.log, Stateless: true, PropagateRequestCancellation: true})
	return d.endSessionFirst(d.sessions.tracked(newFastHTTP(d.gw, bySession(sessions, sessionless), d.idle)))
}

// endSessionFirst ends a session's calls in flight before its DELETE reaches the
// SDK, whose close waits for them: the client's cancel notification may come
// after its DELETE, and a call to a server that never answers would hold it.
func (d *Doors) endSessionFirst(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				d.gw.EndSession(id)
			}
		}
		h.ServeHTTP(w, r)
	})
}
