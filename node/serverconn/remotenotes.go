package serverconn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/gateway"
)

// replyTransport bounds a remote server's replies as a local server's messages
// are bounded (docs/promises.md §9): each JSON body and each event of an event
// stream is held up to the node's per-message limit and no further. A reply
// over it is never read whole: the call it answers gets a "result too large"
// error and the session goes on. It bounds the server's notifications too:
// every event stream the server answers with (the SSE transport's stream, the
// streamable transport's GET stream and the streams answering its POSTs) is read
// through a filter that drops the notifications over the server's rate before
// the SDK decodes them, so a flood costs the node no forwarding, list refetch or
// logging, and little reading.
type replyTransport struct {
	// max is the largest reply (a JSON body, an event) passed on.
	max int
	// tooLarge is told of each reply dropped for its size, with the id it
	// answered (if known) and the bytes read of it (or announced).
	tooLarge func(id string, size int)
	// notes bounds the server's notifications; nil lets every one through.
	notes *NoteLimiter
	// progress takes the progress of the gateway's calls (nil: none).
	progress *ProgressWatch
	next     http.RoundTripper
	// asked: the node's requests the server has not answered yet, read from
	// what the node POSTs; only answers to them pass free of the rate.
	asked AskedIDs
}

func (t *replyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var call jsonrpc.ID // the request a POST carries, which its reply answers
	if r.Method == http.MethodPost && r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxEvent))
			body.Close()
			if msg, err := jsonrpc.DecodeMessage(b); err == nil {
				if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
					call = req.ID
					t.asked.AddID(req.ID)
				}
			}
		}
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	// A GET is the server's event stream whatever type it names: the SSE
	// transport reads it as one without looking.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" || r.Method == http.MethodGet {
		resp.Body = &eventFilter{body: resp.Body, in: newEventReader(resp.Body), max: t.max, tooLarge: t.tooLarge, call: call,
			notes: t.notes, asked: &t.asked, progress: t.progress, closed: make(chan struct{})}
		return resp, nil
	}
	// Any other body is read whole by the SDK (a JSON answer, an error's body).
	resp.Body = &boundedBody{body: resp.Body, max: t.max, length: resp.ContentLength, call: call, tooLarge: t.tooLarge}
	return resp, nil
}

// maxEvent is the most of one request of the node's the transport reads back to
// learn its id.
const maxEvent = mcp.DefaultMaxEventSize

// eventReadSize is the most an event stream's reader hands over at once.
const eventReadSize = 64 << 10

func newEventReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, eventReadSize) }

// idJSON is an id as it is written in a message.
func idJSON(id jsonrpc.ID) []byte {
	b, _ := json.Marshal(id.Raw())
	return b
}

// boundedBody hands the SDK a body it reads whole only when the body is within
// max. One over it (announced or read) is not read on: its connection is closed
// and the body becomes the error answering the call the request carried.
type boundedBody struct {
	body     io.ReadCloser
	max      int
	length   int64 // announced; -1: unknown
	call     jsonrpc.ID
	tooLarge func(id string, size int)
	out      *bytes.Reader
	err      error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.out == nil {
		b.fill()
	}
	n, err := b.out.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (b *boundedBody) fill() {
	var buf []byte
	size := b.length
	if b.length <= int64(b.max) {
		room := 4 << 10
		if b.length >= 0 {
			room = int(b.length) + 1 // +1: a body longer than it announced is seen
		}
		buf, b.err = readUpTo(b.body, room, b.max+1)
		size = int64(len(buf))
	}
	if size <= int64(b.max) {
		b.out = bytes.NewReader(buf)
		return
	}
	// The rest is never read: closing an unread body drops its connection.
	b.body.Close()
	b.err = nil
	if len(buf) >= LargeMessage {
		ReleaseSoon()
	}
	id := ""
	if b.call.IsValid() {
		id = string(idJSON(b.call))
		buf = TooLargeAnswer([]byte(id), b.max)
	} else {
		buf = nil
	}
	if b.tooLarge != nil {
		b.tooLarge(id, int(size))
	}
	b.out = bytes.NewReader(buf)
}

func (b *boundedBody) Close() error { return b.body.Close() }

// readUpTo reads r to its end or to limit bytes, whichever comes first, starting
// with room bytes and doubling it as needed but never past limit: a body cut at
// limit costs about twice limit in copies, not the four times a buffer that
// doubles past it would. A read error other than the end is returned with what
// was read.
func readUpTo(r io.Reader, room, limit int) ([]byte, error) {
	buf := make([]byte, 0, min(room, limit))
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = appendDoubling(buf, nil, limit)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// eventFilter passes an event stream on event by event, each held whole up to
// max. An event over it is read no further than that: the rest is skipped, and
// a response over it becomes the error answering its call (a POST's stream then
// ends there). Only the stream's first endpoint event and answers to the node's
// requests pass free of the rate; every other event (a notification, a request
// to the node, an answer to nothing, an event that is no message) costs the
// server's rate and is left out over it.
type eventFilter struct {
	body     io.ReadCloser
	in       *bufio.Reader
	max      int
	tooLarge func(id string, size int)
	// call is the request whose POST this stream answers (none for a GET).
	call     jsonrpc.ID
	notes    *NoteLimiter
	asked    *AskedIDs
	progress *ProgressWatch
	// endpoint: the stream's endpoint event (SSE transport) has passed.
	endpoint bool
	out      []byte // what is left of the event being passed on
	ev       []byte // the event being read, as read
	data     []byte // its data
	err      error
	closed   chan struct{}
	once     sync.Once
}

func (f *eventFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.next()
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// next reads one event and makes it the output unless it is dropped. An event
// cut short by the stream's end is passed on as it is.
func (f *eventFilter) next() {
	if cap(f.ev) > LargeMessage {
		f.ev = nil // a large result's copy is not kept for the stream's life
	}
	if cap(f.data) > LargeMessage {
		f.data = nil
	}
	f.ev, f.data = f.ev[:0], f.data[:0]
	event, hasData := "message", false
	for {
		start := len(f.ev)
		line, err := f.in.ReadSlice('\n')
		for {
			f.ev = appendDoubling(f.ev, line, f.max+eventReadSize)
			if err != bufio.ErrBufferFull || len(f.ev) > f.max {
				break
			}
			line, err = f.in.ReadSlice('\n')
		}
		if len(f.ev) > f.max {
			head := f.data // what was read of the message: its id is near its start
			if name, value, _ := bytes.Cut(f.ev[start:], []byte(":")); string(name) == "data" {
				value = bytes.TrimPrefix(value, []byte(" "))
				if hasData {
					head = append(append(f.data, '\n'), value...)
				} else {
					head = value
				}
			}
			f.tooBig(event, head, err)
			return
		}
		if err != nil {
			f.err = err
			f.out = f.ev
			return
		}
		field := bytes.TrimRight(f.ev[start:], "\r\n")
		if len(field) == 0 {
			break
		}
		name, value, _ := bytes.Cut(field, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			event = string(value)
		case "data":
			if hasData {
				f.data = append(f.data, '\n')
			}
			f.data, hasData = append(f.data, value...), true
		}
	}
	f.pass(event, hasData)
}

// pass makes the event just read the output unless the server's rate drops it.
func (f *eventFilter) pass(event string, hasData bool) {
	if free, decoded := f.free(event, hasData); !free && f.notes != nil {
		weight := 1
		if decoded {
			weight = DecodedDropWeight
		}
		ok, pause := f.notes.AllowWeighted(len(f.ev), weight)
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-f.closed:
			}
		}
		if !ok {
			return
		}
	}
	// A call's progress goes to the call, ahead of the answer that follows it
	// on the stream.
	if f.progress.watching() && hasData && event == "message" && bytes.Contains(f.data, []byte("notifications/progress")) {
		if msg, err := gateway.DecodeMessage(f.data); err == nil && f.progress.take(msg) {
			return
		}
	}
	f.out = f.ev
}

// tooBig deals with an event that grew past max while its line ended with err
// (nil: at the line's end): the rest of it is skipped unread, and a response
// is answered in its place with the error, as a local server's is
// (boundedLines). The id is looked for in what was read of it; on a POST's
// stream a response whose id comes later answers the POST's call, and the
// stream ends there, unread.
func (f *eventFilter) tooBig(event string, head []byte, err error) {
	size := len(f.ev)
	var id jsonrpc.ID
	top := ScanTop(head)
	if event == "message" && !top.method {
		if v, ok := top.idSoFar(); ok {
			id = v
		} else if f.call.IsValid() && !top.hasID {
			id = f.call
		}
	}
	if len(f.ev) >= LargeMessage {
		ReleaseSoon()
	}
	f.ev, f.data = nil, nil
	ends := id.IsValid() && f.call.IsValid() && id == f.call
	if !ends {
		n, serr := f.skip(err == nil)
		size += n
		if serr != nil {
			f.err = serr
		}
	}
	idText := ""
	if id.IsValid() {
		idText = string(idJSON(id))
	}
	if f.tooLarge != nil {
		f.tooLarge(idText, size)
	}
	if !id.IsValid() {
		return
	}
	if ends {
		f.err = io.EOF // the call is answered: the rest of its stream is not read
	}
	answer := TooLargeAnswer([]byte(idText), f.max)
	f.ev = append(append(append(f.ev[:0], "event: message\ndata: "...), answer...), "\n\n"...)
	f.data = answer
	f.pass("message", true)
}

// appendDoubling appends b to buf, doubling its room when it must grow, and
// going straight to ceiling when a second doubling would pass it (unless b needs
// more): an event of several MiB then costs about twice its size in copies, not
// the five times append's slower growth of large slices does, and one cut at the
// bound no more.
func appendDoubling(buf, b []byte, ceiling int) []byte {
	if need := len(buf) + len(b); need > cap(buf) || need == cap(buf) && len(b) == 0 {
		room := max(2*cap(buf), 4<<10)
		if 2*room > ceiling {
			room = ceiling
		}
		grown := make([]byte, len(buf), max(room, need))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, b...)
}

// skip reads past the rest of an event, holding none of it; atLineStart says
// whether the last line read was whole. It returns the bytes read.
func (f *eventFilter) skip(atLineStart bool) (int, error) {
	n := 0
	for {
		line, err := f.in.ReadSlice('\n')
		n += len(line)
		if err == bufio.ErrBufferFull {
			atLineStart = false
			continue
		}
		if err != nil {
			return n, err
		}
		if atLineStart && (len(line) == 1 || len(line) == 2 && line[0] == '\r') {
			return n, nil
		}
		atLineStart = true
	}
}

// free reports whether the event just read passes without costing the rate: the
// stream's first endpoint event, or an answer to a request of the node's, read as
// the SDK will read it; decoded, whether that took a decode.
func (f *eventFilter) free(event string, hasData bool) (free, decoded bool) {
	if event == "endpoint" && !f.endpoint {
		f.endpoint = true
		return true, false
	}
	if event != "message" || !hasData {
		return false, false
	}
	top := ScanTop(f.data)
	if top.Notification() || top.NoMessage() {
		return false, false
	}
	// Most answers are judged by the byte scan: decoded once, by the SDK.
	if id, ok := top.ResponseID(); ok {
		return f.asked != nil && f.asked.Answered(id), false
	}
	msg, err := jsonrpc.DecodeMessage(f.data)
	if len(f.data) >= LargeMessage {
		ReleaseSoon()
	}
	resp, ok := msg.(*jsonrpc.Response)
	return err == nil && ok && f.asked != nil && f.asked.Answered(resp.ID), true
}

func (f *eventFilter) Close() error {
	f.once.Do(func() { close(f.closed) })
	return f.body.Close()
}
