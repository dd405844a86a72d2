package serverconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
)

// Stdio runs a server's command and speaks MCP over its stdin/stdout, as
// the SDK's CommandTransport does, but with its output bounded per message: the
// SDK's own line cap ends the whole connection, failing every other call in
// flight on that server.
type Stdio struct {
	Cmd *exec.Cmd
	// Start starts Cmd (sandbox.Process.Start: born in its cgroup where the
	// backend can); nil: Cmd.Start.
	Start func() error
	// Terminate is how long Close waits after closing the server's input, and
	// again after SIGTERM, before the next step.
	Terminate time.Duration
	Max       int
	// TooLarge is told of each message dropped, with the id it answered (if
	// found) and its size so far.
	TooLarge func(id string, size int)
	// Notes bounds the server's notifications; nil lets every one through.
	Notes *NoteLimiter
	Log   *slog.Logger
	// conn is the connection Connect made, for the gateway's fast path.
	conn *LineConn
}

func (t *Stdio) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.Cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.Cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	start := t.Cmd.Start
	if t.Start != nil {
		start = t.Start
	}
	if err := start(); err != nil {
		return nil, err
	}
	r := &boundedLines{in: bufio.NewReaderSize(stdout, 64<<10), max: t.Max, tooLarge: t.TooLarge}
	w := &stdinCloser{WriteCloser: stdin, cmd: t.Cmd, terminate: t.Terminate}
	log := t.Log
	if log == nil {
		log = slog.Default()
	}
	c := newLineConn(w)
	t.conn = c
	go c.readLoop(r, t.Notes, log)
	return c, nil
}

// Conn is the connection Connect made (nil before): the gateway's fast path
// to the server (gateway.RawBackend).
func (t *Stdio) Conn() *LineConn { return t.conn }

// LineConn is the MCP connection to a stdio server. It decodes each line once,
// from the line itself: the SDK's IOTransport streams it through a json.Decoder
// first, which holds two more growing copies of every message (a result just
// under the limit cost the node ~50x its size). Notifications over the server's
// rate are dropped here, before they are decoded.
type LineConn struct {
	w   *stdinCloser
	wmu sync.Mutex
	// asked holds the ids of the node's requests not yet answered: a response
	// to anything else costs the server's rate, as a notification does.
	asked    AskedIDs
	incoming chan lineMsg
	closed   chan struct{}
	readDone chan struct{} // the server's output ended
	once     sync.Once
	closeErr error
	// broken ends the fast calls in flight, with its cause, when the node
	// breaks the connection (breakableConn), as it ends the SDK's; set before
	// the gateway is given the connection.
	broken context.Context
	// fast are the gateway's calls in flight that bypass the SDK, by id.
	fastMu  sync.Mutex
	fastSeq uint64
	fast    map[jsonrpc.ID]chan *jsonrpc.Response
	// progress takes the progress of the gateway's calls as it is read, not
	// through the SDK (gateway.ProgressOrder).
	ProgressWatch
}

func newLineConn(w *stdinCloser) *LineConn {
	return &LineConn{w: w, incoming: make(chan lineMsg), closed: make(chan struct{}), readDone: make(chan struct{})}
}

type lineMsg struct {
	msg jsonrpc.Message
	err error
}

func (c *LineConn) readLoop(r *boundedLines, notes *NoteLimiter, log *slog.Logger) {
	defer close(c.readDone)
	garbage := 0
	for {
		err := r.next()
		line := r.out
		r.out = nil
		if err != nil {
			select {
			case c.incoming <- lineMsg{err: err}:
			case <-c.closed:
			}
			return
		}
		var top TopKeys
		if notes != nil {
			top = ScanTop(line)
		}
		plain := notes != nil && top.Notification()
		if plain && !c.allow(notes, len(line)) {
			continue
		}
		// A response the scan can read the id of is judged before its decode:
		// a flood of answers to nothing costs as little as one of notifications.
		judged := plain
		if notes != nil && !plain {
			if id, ok := top.ResponseID(); ok {
				judged = true
				if !c.asked.Answered(id) && !c.allow(notes, len(line)) {
					continue
				}
			} else if top.NoMessage() {
				// No message (a stray print): skipped undecoded, at the rate's cost.
				if garbage++; garbage == 1 {
					log.Warn("server wrote a line that is not a JSON-RPC message; skipped", "bytes", len(line))
				}
				c.allow(notes, len(line))
				continue
			}
		}
		msg, err := gateway.DecodeMessage(line)
		if len(line) >= LargeMessage {
			ReleaseSoon()
		}
		if err != nil {
			// A line that is not JSON-RPC (a stray print) is skipped: the
			// server's calls go on.
			if garbage++; garbage == 1 {
				log.Warn("server wrote a line that is not a JSON-RPC message; skipped", "err", err, "bytes", len(line))
			}
			// It cost a decode: a flood of them is paced as one of notifications.
			if notes != nil {
				c.allowDecoded(notes, len(line))
			}
			continue
		}
		// A server's requests to the node (pings, list roots) count against the
		// same rate as its notifications: both cost the node and answer nothing.
		if _, ok := msg.(*jsonrpc.Request); ok && notes != nil && !judged && !c.allowDecoded(notes, len(line)) {
			continue
		}
		// So do responses to requests the node never sent (the SDK ignores
		// them, after their decode).
		if resp, ok := msg.(*jsonrpc.Response); ok && notes != nil && !judged && !c.asked.Answered(resp.ID) && !c.allowDecoded(notes, len(line)) {
			continue
		}
		if c.watching() && c.take(msg) {
			continue
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && c.answerFast(resp) {
			continue
		}
		select {
		case c.incoming <- lineMsg{msg: msg}:
		case <-c.closed:
			return
		}
	}
}

// fastIDPrefix marks the ids of the gateway's fast calls; the SDK numbers its
// requests, so the two never meet.
const fastIDPrefix = "oz0f-"

// CallTool sends one tools/call outside the SDK (gateway.RawBackend) and waits
// for its answer. Cancelled, it tells the server so, as the SDK would.
func (c *LineConn) CallTool(ctx context.Context, params []byte) (*jsonrpc.Response, error) {
	ch := make(chan *jsonrpc.Response, 1)
	c.fastMu.Lock()
	c.fastSeq++
	idText := fastIDPrefix + strconv.FormatUint(c.fastSeq, 10)
	id, _ := jsonrpc.MakeID(idText)
	if c.fast == nil {
		c.fast = map[jsonrpc.ID]chan *jsonrpc.Response{}
	}
	c.fast[id] = ch
	c.fastMu.Unlock()
	forget := func() {
		c.fastMu.Lock()
		delete(c.fast, id)
		c.fastMu.Unlock()
	}
	c.asked.AddID(id)
	line := make([]byte, 0, len(params)+80)
	line = append(line, `{"jsonrpc":"2.0","id":"`...)
	line = append(line, idText...)
	line = append(line, `","method":"tools/call","params":`...)
	line = append(line, params...)
	line = append(line, "}\n"...)
	if err := c.writeRaw(line); err != nil {
		forget()
		return nil, fmt.Errorf("write to server: %w", err)
	}
	var broken <-chan struct{}
	if c.broken != nil {
		broken = c.broken.Done()
	}
	cancelled := func(cause error) (*jsonrpc.Response, error) {
		forget()
		note := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + idText + `","reason":"the caller cancelled the call"}}` + "\n"
		c.writeRaw([]byte(note))
		return nil, cause
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return cancelled(context.Cause(ctx))
	case <-broken:
		return cancelled(context.Cause(c.broken))
	case <-c.readDone:
		forget()
		return nil, errors.New("the server's connection ended")
	case <-c.closed:
		forget()
		return nil, errors.New("the server's connection was closed")
	}
}

// BreaksWith ends the fast calls in flight, with its cause, when broken is
// done: the node breaking the connection ends them as it ends the SDK's. Set
// before the gateway is given the connection.
func (c *LineConn) BreaksWith(broken context.Context) { c.broken = broken }

// FastInFlight is how many fast calls await the server's answer.
func (c *LineConn) FastInFlight() int {
	c.fastMu.Lock()
	defer c.fastMu.Unlock()
	return len(c.fast)
}

// answerFast hands a response to the fast call it answers, if it does.
func (c *LineConn) answerFast(resp *jsonrpc.Response) bool {
	s, ok := resp.ID.Raw().(string)
	if !ok || !strings.HasPrefix(s, fastIDPrefix) {
		return false
	}
	c.fastMu.Lock()
	ch := c.fast[resp.ID]
	delete(c.fast, resp.ID)
	c.fastMu.Unlock()
	if ch != nil {
		ch <- resp
	}
	// An answer to a fast call no one waits for any more (cancelled) is
	// dropped: the SDK knows nothing of it.
	return true
}

func (c *LineConn) writeRaw(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(line)
	return err
}

// allow asks the limiter whether a notification goes on; when it says the
// server's drops are too many to read, the reading waits (the server blocks on
// its output) so that a flood costs the node little whatever its rate.
func (c *LineConn) allow(l *NoteLimiter, size int) bool {
	return c.allowWeighted(l, size, 1)
}

// allowDecoded is allow for a line that was decoded before it was judged.
func (c *LineConn) allowDecoded(l *NoteLimiter, size int) bool {
	return c.allowWeighted(l, size, DecodedDropWeight)
}

func (c *LineConn) allowWeighted(l *NoteLimiter, size, weight int) bool {
	ok, pause := l.AllowWeighted(size, weight)
	if pause > 0 {
		select {
		case <-time.After(pause):
		case <-c.closed:
		}
	}
	return ok
}

func (c *LineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case m := <-c.incoming:
		return m.msg, m.err
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *LineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode message to server: %w", err)
	}
	data = append(data, '\n')
	c.asked.Add(msg)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(data)
	return err
}

func (c *LineConn) Close() error {
	c.once.Do(func() {
		c.closeErr = c.w.Close()
		close(c.closed)
	})
	return c.closeErr
}

func (c *LineConn) SessionID() string { return "" }

// stdinCloser ends the server the way the stdio transport asks: close its input,
// wait, then SIGTERM, wait, then SIGKILL.
type stdinCloser struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (s *stdinCloser) Close() error {
	s.WriteCloser.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case err := <-done:
			return err
		case <-time.After(s.terminate):
		}
		s.cmd.Process.Signal(sig)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(s.terminate):
		return fmt.Errorf("server process %d did not exit after SIGKILL", s.cmd.Process.Pid)
	}
}

// boundedLines passes newline-delimited messages through whole; a message longer
// than max is dropped as it arrives (never held in full) and replaced by a
// JSON-RPC error answering the same id.
type boundedLines struct {
	in       *bufio.Reader
	max      int
	tooLarge func(id string, size int)
	out      []byte // the message being handed out
	line     []byte // reused buffer
}

func (b *boundedLines) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if err := b.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *boundedLines) next() error {
	if cap(b.line) > 1<<20 {
		b.line = nil // do not keep a large message's buffer after it
	}
	b.line = b.line[:0]
	size := 0
	over := false
	for {
		chunk, err := b.in.ReadSlice('\n')
		size += len(chunk)
		if !over {
			if size > b.max {
				over = true // keep what is read so far (the id is near the start)
			} else {
				b.line = append(b.line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if over {
				return err
			}
			if len(b.line) > 0 {
				b.out = b.line
				return nil
			}
			return err
		}
		break
	}
	if !over {
		b.out = b.line
		return nil
	}
	id := topLevelID(b.line)
	if b.tooLarge != nil {
		b.tooLarge(string(id), size)
	}
	if id == nil {
		return nil // nothing to answer: dropped
	}
	b.out = append(TooLargeAnswer(id, b.max), '\n')
	return nil
}

// topLevelID finds the "id" member of the object a (possibly truncated) JSON
// message starts with; nil when it is not in the part given.
func topLevelID(prefix []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if tok == "id" {
			if err := dec.Decode(&v); err != nil {
				return nil
			}
			if len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
				return v
			}
			return nil
		}
		if err := dec.Decode(&v); err != nil {
			return nil
		}
	}
	return nil
}
