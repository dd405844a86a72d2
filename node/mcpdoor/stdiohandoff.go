package mcpdoor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
)

// The stdio door without a relay (docs/operators.md): `oz0-node mcp`
// connects to the stdio endpoint as before, then sends HandoffRequest with its
// own stdin and stdout attached (SCM_RIGHTS). The node answers HandoffAccepted
// and from then on reads and writes the client's pipes itself; the bridge only
// waits on the socket until the node sends HandoffEnded (or the socket closes),
// and exits with the session. The socket stays the session's lifeline: the
// bridge gone (killed by its client), the session ends; the session ended, the
// bridge is told. A node that cannot take the pipes answers anything else, and
// the bridge relays the bytes on a new connection as it always did.
const (
	handoffMethod = "ai.oz0/handoff"
	// HandoffRequest and HandoffRequestAgentHooks ask the node to take the
	// pipes sent along; the latter also marks the session as AgentHooksPreamble
	// does. Requests with an id: a node that knows neither answers an error.
	HandoffRequest           = `{"jsonrpc":"2.0","id":"` + handoffMethod + `","method":"` + handoffMethod + `"}`
	HandoffRequestAgentHooks = `{"jsonrpc":"2.0","id":"` + handoffMethod + `","method":"` + handoffMethod + `","params":{"agentHooks":true}}`
	// HandoffAccepted: the node holds the pipes; the bridge copies nothing.
	HandoffAccepted = `{"jsonrpc":"2.0","id":"` + handoffMethod + `","result":{}}`
	// HandoffEnded and HandoffEndedByNode tell the bridge that the session
	// ended: its client closed its input (exit 0), or the node ended it
	// (stopping, or a cap closed it).
	HandoffEnded       = `{"jsonrpc":"2.0","method":"ai.oz0/session-ended","params":{"by":"client"}}`
	HandoffEndedByNode = `{"jsonrpc":"2.0","method":"ai.oz0/session-ended","params":{"by":"node"}}`
	handoffRefused     = `{"jsonrpc":"2.0","id":"` + handoffMethod + `","error":{"code":-32601,"message":"the node cannot take this bridge's pipes"}}`
)

// handoffOf reports whether first is a handoff request, and with what marks.
func handoffOf(first []byte) (ok, agentHooks bool) {
	switch string(bytes.TrimSpace(first)) {
	case HandoffRequest:
		return true, false
	case HandoffRequestAgentHooks:
		return true, true
	}
	return false, false
}

// serveHandoff serves one session on the client's pipes (in, out) that came
// over c, until the client's input ends, the bridge leaves (c closes) or the
// node ends it.
func (d *Doors) serveHandoff(ctx context.Context, c net.Conn, in, out *os.File, agentHooks bool) {
	touch := func() {}
	if t, ok := c.(interface{ touch() }); ok {
		touch = t.touch // the session caps' idea of activity: the bytes that pass
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			in.Close()
			out.Close()
		})
	}
	defer end()
	// Counted before the bridge hears of it and uncounted before the bridge
	// hears of its end, so that whoever waits on either finds the count true.
	d.caps.HandedOff(1)
	if _, err := io.WriteString(c, HandoffAccepted+"\n"); err != nil {
		d.caps.HandedOff(-1)
		return
	}
	// The socket says nothing more; its end (the bridge killed, a cap or the
	// node's stop closing it) ends the session.
	go func() {
		var b [1]byte
		c.Read(b[:])
		end()
	}()
	r := &doorIn{f: in, touch: touch}
	lc := newCallerConn(r, &doorOut{f: out, touch: touch}, closerFunc(func() error { end(); return nil }), MaxLine)
	d.serveSession(ctx, lc, agentHooks)
	end()
	d.caps.HandedOff(-1)
	msg := HandoffEndedByNode
	if r.eof.Load() {
		msg = HandoffEnded
	}
	io.WriteString(c, msg+"\n")
}

// doorIn is the client's stdin as the node reads it.
type doorIn struct {
	f     *os.File
	touch func()
	eof   atomic.Bool // the client closed its input
}

func (r *doorIn) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	if n > 0 {
		r.touch()
	}
	if errors.Is(err, io.EOF) {
		r.eof.Store(true)
	}
	return n, err
}

// doorOut is the client's stdout as the node writes it.
type doorOut struct {
	f     *os.File
	touch func()
}

func (w *doorOut) Write(p []byte) (int, error) {
	w.touch()
	return w.f.Write(p)
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// refuseHandoff answers a handoff the node cannot take; the bridge then relays
// on a new connection.
func refuseHandoff(c net.Conn) { io.WriteString(c, handoffRefused+"\n") }
