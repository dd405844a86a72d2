package mcpdoor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/peer"
)

// MaxLine bounds one message a client sends on the stdio endpoint.
const MaxLine = 64 << 20

// serveMCPStdio serves the gateway in the stdio framing on ln (<data>/run/mcp-stdio.sock):
// newline-delimited JSON-RPC, one MCP session per connection, so `oz0-node mcp`
// only copies bytes. Only the node's own user and root may connect, as with the
// HTTP socket: the socket is 0600, and each peer's credentials are checked too,
// since a socket exists under the umask's mode before it is narrowed.
func (d *Doors) serveMCPStdio(ctx context.Context, ln net.Listener) {
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
	})
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("MCP stdio socket: accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		uid, err := peer.UID(c)
		if err != nil || !allowedPeer(uid) {
			d.log.Warn("MCP stdio socket: connection refused (not the node's user or root)", "peer_uid", uid, "err", err)
			c.Close()
			continue
		}
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			return
		}
		conns[c] = struct{}{}
		mu.Unlock()
		go func() {
			d.serveStdioConn(ctx, c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// allowedPeer: the node's own user, and root (who passes the socket's mode anyway).
func allowedPeer(uid int) bool { return uid == os.Geteuid() || uid == 0 }

// AgentHooksPreamble is the line `oz0-node mcp --agent-hooks` sends before its
// client's first byte: the whole connection comes from a client that forwards
// its hook events (gateway.AgentHooksCapability), whatever protocol revision it
// speaks. Only a connection's first line is taken as it; anywhere else it is an
// unknown notification.
const AgentHooksPreamble = `{"jsonrpc":"2.0","method":"ai.oz0/agent-hooks"}`

// serveStdioConn runs one caller session on c until either side ends it; the
// SDK ends a gone caller's calls in flight with its connection.
func (d *Doors) serveStdioConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	first, fds, _ := readFirst(c)
	if ok, agentHooks := handoffOf(first); ok && fds != nil {
		in, out, err := pipesOf(fds)
		if err != nil {
			d.log.Warn("MCP stdio socket: the bridge's pipes refused; it relays them", "err", err)
			refuseHandoff(c)
			return
		}
		d.serveHandoff(ctx, c, in, out, agentHooks)
		return
	}
	closeFDs(fds)
	lc := newCallerConn(io.MultiReader(bytes.NewReader(first), c), c, c, MaxLine)
	d.serveSession(ctx, lc, lc.preamble())
}

// serveSession runs one caller session on lc, marked as forwarding its own
// hooks with agentHooks, until either side ends it.
func (d *Doors) serveSession(ctx context.Context, lc *callerConn, agentHooks bool) {
	// The session's first message waits until the connection's marks are in
	// place, so that no message is handled as a plain client's.
	lc.ready = make(chan struct{})
	ss, err := d.gw.Server().Connect(ctx, lc, nil)
	if err != nil {
		close(lc.ready)
		d.log.Warn("MCP stdio socket: session", "err", err)
		return
	}
	if agentHooks {
		defer d.gw.MarkAgentHooks(ss)()
	}
	// Calls on the fast path end with the connection, as the SDK's do.
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errors.New("the MCP caller's connection ended"))
	lc.fast.Store(&fastDoor{gw: d.gw, ss: ss, ctx: fctx})
	close(lc.ready)
	ss.Wait()
}

// fastDoor is what a caller connection needs to answer calls on the gateway's
// fast path; set once its session exists.
type fastDoor struct {
	gw  *gateway.Gateway
	ss  *mcp.ServerSession
	ctx context.Context
}

// serveFast runs a tools/call on the gateway's fast path if it can take it.
func (c *callerConn) serveFast(msg jsonrpc.Message) bool {
	f := c.fast.Load()
	req, ok := msg.(*jsonrpc.Request)
	if f == nil || !ok || req.Method != "tools/call" {
		return false
	}
	fc, ok := f.gw.Fast(f.ss, req)
	if !ok {
		return false
	}
	go func() {
		resp := fc.Run(f.ctx)
		if resp == nil {
			return
		}
		b, err := gateway.AppendResponse(nil, resp)
		if err != nil {
			return
		}
		c.writeLine(b)
	}()
	return true
}

// callerConn is an MCP connection in the stdio framing: one JSON-RPC message per
// line. A line that is no message is answered with a JSON-RPC error (-32700 for
// text that is not JSON, -32600 for JSON that is not a message) and skipped, so one
// bad line does not end the session.
type callerConn struct {
	r   *bufio.Reader
	max int
	// ready, when set, holds the first Read until it is closed.
	ready chan struct{}
	// first is the connection's first line when preamble read one that was not
	// the preamble; the first Read takes it.
	first    []byte
	firstErr error
	hasFirst bool
	wmu      sync.Mutex
	w        io.Writer
	queued   []byte // answers waiting for the write under way
	spare    []byte
	writing  bool // a writeLine is writing
	werr     error
	wdone    *sync.Cond // a write ended
	close    io.Closer
	fast     atomic.Pointer[fastDoor]
}

func newCallerConn(r io.Reader, w io.Writer, c io.Closer, max int) *callerConn {
	return &callerConn{r: bufio.NewReaderSize(r, 64<<10), w: w, close: c, max: max}
}

// Connect makes a callerConn its own transport: each is used for one session.
func (c *callerConn) Connect(context.Context) (mcp.Connection, error) { return c, nil }

func (c *callerConn) SessionID() string { return "" }

func (c *callerConn) Close() error {
	if c.close == nil {
		return nil
	}
	return c.close.Close()
}

// preamble reads the connection's first line and reports whether it is
// AgentHooksPreamble; any other line is kept for the first Read.
func (c *callerConn) preamble() bool {
	line, err := readLine(c.r, c.max)
	if err == nil && string(bytes.TrimSpace(line)) == AgentHooksPreamble {
		return true
	}
	c.first, c.firstErr, c.hasFirst = line, err, true
	return false
}

// line is the next line from the caller.
func (c *callerConn) line() ([]byte, error) {
	if c.hasFirst {
		c.hasFirst = false
		line, err := c.first, c.firstErr
		c.first, c.firstErr = nil, nil
		return line, err
	}
	return readLine(c.r, c.max)
}

func (c *callerConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if c.ready != nil {
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		line, err := c.line()
		if errors.Is(err, errLineTooLong) {
			c.reject(nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: a message longer than %d bytes", c.max))
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			msg, derr := gateway.DecodeMessage(line)
			if derr == nil {
				if c.serveFast(msg) {
					continue
				}
				return msg, nil
			}
			if !json.Valid(line) {
				c.reject(nil, jsonrpc.CodeParseError, "parse error: the line is not JSON")
			} else {
				var probe struct {
					ID json.RawMessage `json:"id"`
				}
				json.Unmarshal(line, &probe)
				c.reject(probe.ID, jsonrpc.CodeInvalidRequest, "invalid request: "+derr.Error())
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

func (c *callerConn) Write(_ context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(b)
}

// writeLine queues b and its newline for the caller and writes what is queued:
// answers that come while a write is under way go out together in the next one
// (one system call and one wake-up of the caller for many), and none interleave.
// A caller that reads nothing holds the writers back once maxQueued waits.
func (c *callerConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for c.writing && len(c.queued) >= maxQueued && c.werr == nil {
		c.wcond().Wait()
	}
	if c.werr != nil {
		return c.werr
	}
	c.queued = append(append(c.queued, b...), '\n')
	if c.writing {
		return nil // the writer under way takes it
	}
	c.writing = true
	for len(c.queued) > 0 && c.werr == nil {
		buf := c.queued
		c.queued = c.spare[:0]
		c.wmu.Unlock()
		_, err := c.w.Write(buf)
		c.wmu.Lock()
		if cap(buf) <= 64<<10 {
			c.spare = buf // one large answer does not pin its buffer for the session
		}
		c.werr = err
		c.wcond().Broadcast()
	}
	c.writing = false
	return c.werr
}

// maxQueued bounds the answers queued behind a write in wait.
const maxQueued = 1 << 20

func (c *callerConn) wcond() *sync.Cond {
	if c.wdone == nil {
		c.wdone = sync.NewCond(&c.wmu)
	}
	return c.wdone
}

// reject answers a line that is no message. id is the line's id when it had a
// usable one (a string or a number), else null.
func (c *callerConn) reject(id json.RawMessage, code int, msg string) {
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg},
	})
	c.writeLine(b)
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline). A line over max is consumed to
// its end and reported as errLineTooLong, so the next read starts afresh.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, errLineTooLong
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
