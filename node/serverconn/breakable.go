package serverconn

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Breakable wraps a server's transport so that the node can end a session
// whatever the server does. The SDK's Close waits for every call in flight to be
// answered before it closes stdin, so a server that never answers would keep the
// old session, its process and the caller waiting for good. Breaking the
// connection fails its reads: every call in flight then returns the given cause,
// and the SDK closes the transport (stdin, then SIGTERM, then SIGKILL).
type Breakable struct {
	Inner mcp.Transport

	mu    sync.Mutex
	conn  *breakableConn
	cause error // set by Break before Connect returned
}

func (t *Breakable) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	bc := newBreakableConn(c)
	t.mu.Lock()
	t.conn = bc
	cause := t.cause
	t.mu.Unlock()
	if cause != nil {
		bc.Break(cause)
	}
	return bc, nil
}

// Break ends the connection's reads with cause.
func (t *Breakable) Break(cause error) {
	t.mu.Lock()
	c := t.conn
	if c == nil && t.cause == nil {
		t.cause = cause
	}
	t.mu.Unlock()
	if c != nil {
		c.Break(cause)
	}
}

// Broken is cancelled, with Break's cause, when the connection is broken (the
// fast path's calls end with it); nil before Connect.
func (t *Breakable) Broken() context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil {
		return nil
	}
	return t.conn.broken
}

type breakableConn struct {
	mcp.Connection
	// broken is cancelled, with the cause, by Break.
	broken context.Context
	brk    context.CancelCauseFunc
}

func newBreakableConn(c mcp.Connection) *breakableConn {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &breakableConn{Connection: c, broken: ctx, brk: cancel}
}

func (c *breakableConn) Break(cause error) { c.brk(cause) }

func (c *breakableConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.broken.Err() != nil {
		return nil, context.Cause(c.broken)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.broken, cancel)
	defer stop()
	msg, err := c.Connection.Read(rctx)
	if err != nil && c.broken.Err() != nil {
		return nil, context.Cause(c.broken)
	}
	return msg, err
}
