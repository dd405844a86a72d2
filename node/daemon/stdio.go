package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/gateway"
)

// DefaultMaxResult is the largest message a local server may send (one JSON-RPC
// line, so one call's result): larger ones are answered to their caller as an
// error and the connection to the server goes on.
const DefaultMaxResult = 8 << 20

// stdioTransport runs a server's command and speaks MCP over its stdin/stdout, as
// the SDK's CommandTransport does, but with its output bounded per message: the
// SDK's own line cap ends the whole connection, failing every other call in
// flight on that server.
type stdioTransport struct {
	cmd *exec.Cmd
	// start starts cmd (sandbox.Process.Start: born in its cgroup where the
	// backend can); nil: cmd.Start.
	start     func() error
	terminate time.Duration
	max       int
	// tooLarge is told of each message dropped, with the id it answered (if
	// found) and its size so far.
	tooLarge func(id string, size int)
	// notes bounds the server's notifications; nil lets every one through.
	notes *noteLimiter
	log   *slog.Logger
	// conn is the connection Connect made, for the gateway's fast path.
	conn *lineConn
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	start := t.cmd.Start
	if t.start != nil {
		start = t.start
	}
	if err := start(); err != nil {
		return nil, err
	}
	r := &boundedLines{in: bufio.NewReaderSize(stdout, 64<<10), max: t.max, tooLarge: t.tooLarge}
	w := &stdinCloser{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate}
	log := t.log
	if log == nil {
		log = slog.Default()
	}
	c := newLineConn(w)
	t.conn = c
	go c.readLoop(r, t.notes, log)
	return c, nil
}

// lineConn is the MCP connection to a stdio server. It decodes each line once,
// from the line itself: the SDK's IOTransport streams it through a json.Decoder
// first, which holds two more growing copies of every message (a result just
// under the limit cost the node ~50x its size). Notifications over the server's
// rate are dropped here, before they are decoded.
type lineConn struct {
	w   *stdinCloser
	wmu sync.Mutex
	// asked holds the ids of the node's requests not yet answered: a response
	// to anything else costs the server's rate, as a notification does.
	asked    askedIDs
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
}

func newLineConn(w *stdinCloser) *lineConn {
	return &lineConn{w: w, incoming: make(chan lineMsg), closed: make(chan struct{}), readDone: make(chan struct{})}
}

type lineMsg struct {
	msg jsonrpc.Message
	err error
}

func (c *lineConn) readLoop(r *boundedLines, notes *noteLimiter, log *slog.Logger) {
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
		var top topKeys
		if notes != nil {
			top = scanTop(line)
		}
		plain := notes != nil && top.notification()
		if plain && !c.allow(notes, len(line)) {
			continue
		}
		// A response the scan can read the id of is judged before its decode:
		// a flood of answers to nothing costs as little as one of notifications.
		judged := plain
		if notes != nil && !plain {
			if id, ok := top.responseID(); ok {
				judged = true
				if !c.asked.answered(id) && !c.allow(notes, len(line)) {
					continue
				}
			} else if top.noMessage() {
				// No message (a stray print): skipped undecoded, at the rate's cost.
				if garbage++; garbage == 1 {
					log.Warn("server wrote a line that is not a JSON-RPC message; skipped", "bytes", len(line))
				}
				c.allow(notes, len(line))
				continue
			}
		}
		msg, err := gateway.DecodeMessage(line)
		if len(line) >= largeMessage {
			releaseSoon()
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
		if resp, ok := msg.(*jsonrpc.Response); ok && notes != nil && !judged && !c.asked.answered(resp.ID) && !c.allowDecoded(notes, len(line)) {
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
func (c *lineConn) CallTool(ctx context.Context, params []byte) (*jsonrpc.Response, error) {
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
	c.asked.addID(id)
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

// fastInFlight is how many fast calls await the server's answer.
func (c *lineConn) fastInFlight() int {
	c.fastMu.Lock()
	defer c.fastMu.Unlock()
	return len(c.fast)
}

// answerFast hands a response to the fast call it answers, if it does.
func (c *lineConn) answerFast(resp *jsonrpc.Response) bool {
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

func (c *lineConn) writeRaw(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(line)
	return err
}

// allow asks the limiter whether a notification goes on; when it says the
// server's drops are too many to read, the reading waits (the server blocks on
// its output) so that a flood costs the node little whatever its rate.
func (c *lineConn) allow(l *noteLimiter, size int) bool {
	return c.allowWeighted(l, size, 1)
}

// decodedDropWeight: a line judged only after its decode (an escaped key, say)
// costs the node some twenty times what one the byte scan drops does, so its drop
// counts as many toward the pacing.
const decodedDropWeight = 20

// allowDecoded is allow for a line that was decoded before it was judged.
func (c *lineConn) allowDecoded(l *noteLimiter, size int) bool {
	return c.allowWeighted(l, size, decodedDropWeight)
}

func (c *lineConn) allowWeighted(l *noteLimiter, size, weight int) bool {
	ok, pause := l.allowWeighted(size, weight)
	if pause > 0 {
		select {
		case <-time.After(pause):
		case <-c.closed:
		}
	}
	return ok
}

func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
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

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode message to server: %w", err)
	}
	data = append(data, '\n')
	c.asked.add(msg)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(data)
	return err
}

// maxAsked bounds the unanswered request ids a connection remembers.
const maxAsked = 1 << 14

// askedIDs are the ids of the requests the node sent a server and it has not
// answered yet. Its own lock: the reading never waits on a write blocked by a
// full pipe.
type askedIDs struct {
	mu  sync.Mutex
	ids map[jsonrpc.ID]struct{}
}

// add remembers msg's id if it is a request (not a notification).
func (a *askedIDs) add(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		a.addID(req.ID)
	}
}

// addID remembers the id of a request.
func (a *askedIDs) addID(id jsonrpc.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil || len(a.ids) >= maxAsked {
		// Requests never answered (a server that hangs) are forgotten in bulk;
		// a late answer to one then only costs the server's rate.
		a.ids = map[jsonrpc.ID]struct{}{}
	}
	a.ids[id] = struct{}{}
}

// answered reports whether id is that of a request the node sent and the server
// had not answered yet, and forgets it.
func (a *askedIDs) answered(id jsonrpc.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.ids[id]; ok {
		delete(a.ids, id)
		return true
	}
	return false
}

func (c *lineConn) Close() error {
	c.once.Do(func() {
		c.closeErr = c.w.Close()
		close(c.closed)
	})
	return c.closeErr
}

func (c *lineConn) SessionID() string { return "" }

// largeMessage is the size from which a message's copies are worth handing back
// to the system once it has been answered: the collector would keep their pages
// (the node runs with a lazy GC for call latency) until its next cycle, minutes
// away on an idle node.
const largeMessage = 1 << 20

// manyTools is the size of a tool list from which attaching it is worth a
// release: the SDK re-reads each tool's schema several times when it lists and
// adds it, some 80 KB of garbage a tool (2000 tools left the node at ~100 MB).
const manyTools = 100

// releaseDelays leave the result time to reach its caller before a collection;
// the later one catches a result still being written on a busy machine.
var releaseDelays = [...]time.Duration{time.Second, 5 * time.Second}

var (
	releaseMu     sync.Mutex
	releaseTimers []*time.Timer
)

// releaseSoon returns the heap's free pages to the system once no large message
// has been read for each of releaseDelays: two collections after a burst of
// them, not two each.
func releaseSoon() {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if releaseTimers == nil {
		for _, d := range releaseDelays {
			releaseTimers = append(releaseTimers, time.AfterFunc(d, release))
		}
		return
	}
	for i, t := range releaseTimers {
		t.Reset(releaseDelays[i])
	}
}

func release() {
	// encoding/json keeps its large encode buffers in a sync.Pool, which a
	// first collection only moves to its victim cache.
	runtime.GC()
	debug.FreeOSMemory()
}

// releaseEvery is how often the node looks for memory it holds and no longer
// uses (expired sessions, a burst of calls): one collection at most that often.
const releaseEvery = 30 * time.Second

// releaseIdle returns memory to the system when the heap holds much more than
// its live data: the lazy collector would otherwise keep what a burst left
// (5,000 expired sessions kept the node at 150 MB, six times their live heap).
func releaseIdle(ctx context.Context, every time.Duration) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		held, live := s[0].Value.Uint64()+s[1].Value.Uint64(), s[2].Value.Uint64()
		// At most one forced collection every period, and only when 32 MiB or
		// more could go back: cheap next to what the lazy collector keeps.
		if held > live+32<<20 {
			debug.FreeOSMemory()
		}
	}
}

// noteLimiter is a token bucket over one server's notifications: rate a second,
// bursts up to burst, each costing one token and one more per 64 KiB (a large
// notification costs the node as many small ones would). What is over is dropped
// and counted; past maxDrops drops or maxDropBytes in a second the reading pauses
// until the second ends.
type noteLimiter struct {
	rate, burst float64
	dropped     *atomic.Int64
	// onDrop is called with the total dropped at the first drop and then at
	// most every dropReport.
	onDrop func(total int64)

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	reported time.Time
	window   time.Time // start of the second drops are counted in
	drops    int
	dropSize int
}

const dropReport = 10 * time.Second

// maxDrops is how many notifications a second a server may have dropped before
// its output is read no faster: dropping one costs well under a microsecond, so
// this keeps a flood under a few per cent of a core (unpaced, a server sending
// 1.7 million a second kept the node at 0.9 core).
const maxDrops = 20000

// maxDropBytes bounds the bytes a second dropped notifications may take: each is
// read and scanned before it is dropped.
const maxDropBytes = 16 << 20

// allowWeighted says whether a message of size bytes goes on, and how long the
// reading should wait; a drop counts weight times toward the pacing (the message's
// cost to the node before it could be judged).
func (l *noteLimiter) allowWeighted(size, weight int) (ok bool, pause time.Duration) {
	cost := float64(1 + size>>16)
	now := time.Now()
	l.mu.Lock()
	if l.last.IsZero() {
		l.tokens = l.burst
	} else {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens >= cost {
		l.tokens -= cost
		l.mu.Unlock()
		return true, 0
	}
	report := l.reported.IsZero() || now.Sub(l.reported) >= dropReport
	if report {
		l.reported = now
	}
	if now.Sub(l.window) >= time.Second {
		l.window, l.drops, l.dropSize = now, 0, 0
	}
	l.drops += weight
	if l.dropSize += size; l.drops >= maxDrops || l.dropSize >= maxDropBytes {
		pause = time.Second - now.Sub(l.window)
	}
	l.mu.Unlock()
	total := l.dropped.Add(1)
	if report && l.onDrop != nil {
		l.onDrop(total)
	}
	return false, pause
}

// notification reports whether a message is certainly a notification: an object
// whose plain top-level keys include "method" and not "id". What the scan cannot
// tell is decoded and judged.
func (t topKeys) notification() bool { return t.plain && t.method && !t.hasID }

// responseID reports whether a message is certainly a response (an object whose
// top-level keys, none of them escaped nor a case variant of "id" or "method",
// include "id" and not "method") with an id the bytes give as the decoder would
// (an integer of at most 15 digits or a string without escapes), and returns that
// id. What it cannot tell is decoded.
func (t topKeys) responseID() (jsonrpc.ID, bool) {
	if !t.plain {
		return jsonrpc.ID{}, false
	}
	return t.idSoFar()
}

// idSoFar is responseID for the start of a message cut short: its id when no
// "method" came before the cut (what follows it is not known).
func (t topKeys) idSoFar() (jsonrpc.ID, bool) {
	if t.method || len(t.id) == 0 {
		return jsonrpc.ID{}, false
	}
	if t.id[0] == '"' {
		v, err := jsonrpc.MakeID(string(t.id[1 : len(t.id)-1]))
		return v, err == nil
	}
	if len(t.id) > 15 {
		return jsonrpc.ID{}, false
	}
	n, err := strconv.ParseInt(string(t.id), 10, 64)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	v, err := jsonrpc.MakeID(float64(n))
	return v, err == nil
}

// noMessage reports whether a line is certainly no JSON-RPC message: not an
// object, or one whose plain top-level keys include neither "id" nor "method".
func (t topKeys) noMessage() bool { return t.notObject || t.plain && !t.method && !t.hasID }

// topKeys is what scanTop finds of a message's top-level keys.
type topKeys struct {
	notObject bool   // the line does not start with an object
	plain     bool   // an object whose keys are unescaped and no case variant of "id" or "method"
	method    bool   // it has "method"
	hasID     bool   // it has "id"
	id        []byte // the id's value when an integer or a string without escapes
}

// scanTop reads a message's top-level keys once, allocating nothing, so a flood
// is judged for less than decoding it would cost.
func scanTop(msg []byte) topKeys {
	if i := bytes.IndexFunc(msg, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' }); i < 0 || msg[i] != '{' {
		return topKeys{notObject: true}
	}
	var t topKeys
	depth, inStr, esc := 0, false, false
	key := -1 // start of the top-level key being read
	wantKey, afterID := false, false
	idStr := -1 // start of the id's string
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
				if key >= 0 {
					return topKeys{}
				}
				if idStr >= 0 {
					idStr = -1 // an escaped id is left to the decoder
					t.id = nil
				}
			case c == '"':
				inStr = false
				if idStr >= 0 {
					t.id, idStr = msg[idStr-1:i+1], -1
				}
				if key >= 0 {
					k := msg[key:i]
					switch {
					case string(k) == "id":
						t.hasID, afterID, t.id = true, true, nil
					case string(k) == "method":
						t.method = true
					case bytes.EqualFold(k, []byte("id")) || bytes.EqualFold(k, []byte("method")):
						return topKeys{}
					}
					key = -1
				}
			}
			continue
		}
		if afterID && c != ':' && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			afterID = false
			switch {
			case c == '"':
				idStr = i + 1
			case c == '-' || c >= '0' && c <= '9':
				j := i + 1
				for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
					j++
				}
				if j < len(msg) && (msg[j] == '.' || msg[j] == 'e' || msg[j] == 'E') {
					break // a fraction or exponent is left to the decoder
				}
				t.id = msg[i:j]
			}
		}
		switch c {
		case '"':
			inStr = true
			if depth == 1 && wantKey {
				key, wantKey = i+1, false
			}
		case '{', '[':
			depth++
			if depth == 1 {
				if c != '{' {
					return topKeys{}
				}
				wantKey = true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				wantKey = true
			}
		}
	}
	t.plain = depth == 0 && !inStr
	return t
}

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
	b.out = append(tooLargeAnswer(id, b.max), '\n')
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

// DefaultNotifyRate is how many notifications a second a server may send,
// in bursts of up to ten times as many: progress and log lines of many calls at
// once stay well under it, while a flood (which cost the node a core and every
// caller ten times their latency) is cut to it.
const DefaultNotifyRate = 200

// noteLimiter builds a server's notification limiter; its drops add to the
// server's count in status and raise a notification-flood finding.
func (d *Daemon) noteLimiter(plugin, server string) *noteLimiter {
	rate := float64(cmp.Or(d.cfg.NotifyRate, DefaultNotifyRate))
	k := key(plugin, server)
	d.mu.Lock()
	if d.notesDropped == nil {
		d.notesDropped = map[string]*atomic.Int64{}
	}
	n := d.notesDropped[k]
	if n == nil {
		n = new(atomic.Int64)
		d.notesDropped[k] = n
	}
	d.mu.Unlock()
	return &noteLimiter{rate: rate, burst: 10 * rate, dropped: n, onDrop: func(total int64) {
		d.raise(api.Finding{Code: api.CodeNotificationFlood, Severity: api.SevWarning, Subject: plugin + "/" + server,
			Message: fmt.Sprintf("server %s/%s sends notifications (or requests to the node) faster than %d a second; %d were dropped so far", plugin, server, int(rate), total),
			Fix:     "report it to the plugin's author: the server floods progress, log or list-changed notifications"})
	}}
}

// notesDroppedOf is how many notifications of a server were dropped.
func (d *Daemon) notesDroppedOf(plugin, server string) int64 {
	if n := d.notesDropped[key(plugin, server)]; n != nil {
		return n.Load()
	}
	return 0
}
