package daemon

import (
	"bufio"
	"bytes"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// noteTransport bounds a remote server's notifications as stdio servers' are:
// every event stream the server answers with (the SSE transport's stream, the
// streamable transport's GET stream and the streams answering its POSTs) is read
// through a filter that drops the notifications over the server's rate before
// the SDK decodes them, so a flood costs the node no forwarding, list refetch or
// logging, and little reading.
type noteTransport struct {
	notes *noteLimiter
	next  http.RoundTripper
	// asked: the node's requests the server has not answered yet, read from
	// what the node POSTs; only answers to them pass free of the rate.
	asked askedIDs
}

func (t *noteTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.notes != nil && r.Method == http.MethodPost && r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxEvent))
			body.Close()
			if msg, err := jsonrpc.DecodeMessage(b); err == nil {
				t.asked.add(msg)
			}
		}
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil || t.notes == nil || resp.Body == nil {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		resp.Body = &eventFilter{body: resp.Body, in: newEventReader(resp.Body), notes: t.notes, asked: &t.asked, closed: make(chan struct{})}
	}
	return resp, err
}

// maxEvent is the most of one event the filter holds: the SDK's client refuses
// larger events.
const maxEvent = mcp.DefaultMaxEventSize

func newEventReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// eventFilter passes an event stream on event by event. Only the stream's first
// endpoint event and answers to the node's requests pass free; every other event
// (a notification, a request to the node, an answer to nothing, an event that is
// no message) costs the server's rate and is left out over it.
type eventFilter struct {
	body  io.ReadCloser
	in    *bufio.Reader
	notes *noteLimiter
	asked *askedIDs
	// endpoint: the stream's endpoint event (SSE transport) has passed.
	endpoint bool
	out      []byte // what is left of the event being passed on
	ev       []byte // the event being read, as read
	data     []byte // its data
	err      error
	raw      bool // an event grew past maxEvent: the rest passes unread
	closed   chan struct{}
	once     sync.Once
}

func (f *eventFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.raw {
			return f.in.Read(p)
		}
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
	if cap(f.ev) > largeMessage {
		f.ev = nil // a large result's copy is not kept for the stream's life
	}
	if cap(f.data) > largeMessage {
		f.data = nil
	}
	f.ev, f.data = f.ev[:0], f.data[:0]
	event, hasData := "message", false
	for {
		start := len(f.ev)
		line, err := f.in.ReadSlice('\n')
		for err == bufio.ErrBufferFull && len(f.ev) <= maxEvent {
			f.ev = append(f.ev, line...)
			line, err = f.in.ReadSlice('\n')
		}
		f.ev = append(f.ev, line...)
		if len(f.ev) > maxEvent {
			// Past the SDK's own bound it ends the stream; what is held here
			// stays bounded too.
			f.out = f.ev
			if err == nil || err == bufio.ErrBufferFull {
				f.raw = true
			} else {
				f.err = err
			}
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
	if free, decoded := f.free(event, hasData); !free {
		weight := 1
		if decoded {
			weight = decodedDropWeight
		}
		ok, pause := f.notes.allowWeighted(len(f.ev), weight)
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
	f.out = f.ev
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
	top := scanTop(f.data)
	if top.notification() || top.noMessage() {
		return false, false
	}
	// Most answers are judged by the byte scan: decoded once, by the SDK.
	if id, ok := top.responseID(); ok {
		return f.asked != nil && f.asked.answered(id), false
	}
	msg, err := jsonrpc.DecodeMessage(f.data)
	if len(f.data) >= largeMessage {
		releaseSoon()
	}
	resp, ok := msg.(*jsonrpc.Response)
	return err == nil && ok && f.asked != nil && f.asked.answered(resp.ID), true
}

func (f *eventFilter) Close() error {
	f.once.Do(func() { close(f.closed) })
	return f.body.Close()
}
