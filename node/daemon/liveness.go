package daemon

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/serverconn"
)

// The liveness check of a local server (docs/operators.md, "Frozen servers"):
// the supervisor pings a running server that has no call in flight, and one
// whose call ran out of the node's deadline; a server that does not answer in
// time is reported unresponsive and restarted (supervise.Liveness).

// pendingTransport counts the node's requests to a server that it has not
// answered yet (on the SDK's path; the fast path keeps its own,
// serverconn.LineConn): a request leaves the count when answered or when the node
// cancels it.
type pendingTransport struct {
	inner mcp.Transport
	conn  *pendingConn
}

func (t *pendingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.conn = &pendingConn{Connection: c, ids: map[jsonrpc.ID]struct{}{}}
	return t.conn, nil
}

type pendingConn struct {
	mcp.Connection
	mu  sync.Mutex
	ids map[jsonrpc.ID]struct{}
}

func (c *pendingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok {
		switch {
		case req.ID.IsValid():
			c.mu.Lock()
			if len(c.ids) < serverconn.MaxAsked {
				c.ids[req.ID] = struct{}{}
			}
			c.mu.Unlock()
		case req.Method == "notifications/cancelled":
			// The node gave up on a request: it no longer awaits its answer.
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(req.Params, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
					c.mu.Lock()
					delete(c.ids, id)
					c.mu.Unlock()
				}
			}
		}
	}
	return c.Connection.Write(ctx, msg)
}

func (c *pendingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.mu.Lock()
		delete(c.ids, resp.ID)
		c.mu.Unlock()
	}
	return msg, err
}

func (c *pendingConn) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// Busy implements supervise.Liveness: a call (or any request) of the node's is
// in flight to the server. A remote server is never checked on a schedule.
func (m *mcpSession) Busy() bool {
	if m.live == nil || m.live.conn == nil {
		return true
	}
	return m.live.conn.pending() > 0 || m.raw != nil && m.rawPending() > 0
}

// Ping implements supervise.Liveness: the MCP ping, answered or not by ctx's
// end. A remote server is not checked (its HTTP client bounds its requests).
func (m *mcpSession) Ping(ctx context.Context) error {
	if m.live == nil {
		return nil
	}
	return m.cs.Ping(ctx, nil)
}

// rawPending is the fast path's calls in flight to the server.
func (m *mcpSession) rawPending() int {
	if c, ok := m.raw.(*serverconn.LineConn); ok {
		return c.FastInFlight()
	}
	return 0
}

// Kill implements supervise.Killer: the server's process ends at once (its
// sandbox's cleanup follows on Close).
func (m *mcpSession) Kill() {
	if m.kill != nil {
		m.kill()
	}
}
