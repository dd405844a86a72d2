package serverconn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func mustID(t *testing.T, v float64) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A remote server over the SSE transport floods progress during a call: the
// node's client sees no more than the rate lets through, the drops are counted,
// and the call's answer, sent after the flood on the same stream, arrives.
func TestRemoteNotificationsAreBoundedOverSSE(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "loud", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "flood"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		sent := 0
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && ctx.Err() == nil; sent++ {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "t", Progress: float64(sent)})
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent %d", sent)}}}, nil, nil
	})
	remote := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.SSEOptions{DisableLocalhostProtection: true}))
	defer remote.Close()

	var dropped atomic.Int64
	var reports atomic.Int32
	notes := NewNoteLimiter(100, 1000, &dropped, func(int64) { reports.Add(1) })
	hc := RemoteClient(proxyFor(t, true), nil, Limits{Notes: notes})
	var seen atomic.Int64
	c := mcp.NewClient(&mcp.Implementation{Name: "node", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { seen.Add(1) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	cs, err := c.Connect(ctx, &mcp.SSEClientTransport{Endpoint: "http://a.test:" + portOf(remote) + "/", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	time.Sleep(100 * time.Millisecond) // notifications are handed on concurrently
	elapsed := time.Since(start)
	t.Logf("server %s; the client saw %d, %d dropped, in %v", text, seen.Load(), dropped.Load(), elapsed)
	if !strings.HasPrefix(text, "sent ") {
		t.Fatalf("answer %q", text)
	}
	if limit := int64(1000 + 100*elapsed.Seconds() + 10); seen.Load() > limit {
		t.Errorf("the client saw %d notifications, over the %d the rate allows", seen.Load(), limit)
	}
	if dropped.Load() == 0 || reports.Load() == 0 {
		t.Errorf("dropped %d, reported %d times; want both counted", dropped.Load(), reports.Load())
	}
}

// The filter judges whole events: a notification split over several data lines,
// ending its lines with CRLF or hiding its method behind an escaped key is
// dropped like any other, as is a request to the node, an answer to a request
// the node never sent, an event with data that is no message or with none, and an
// event of another type, over the rate; the stream's endpoint and answers to the
// node's requests always pass, byte for byte.
func TestEventFilterDropsOnlyNotifications(t *testing.T) {
	note := "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata: \"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n"
	resp := "event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n"
	req := "data: {\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n\n"
	endpoint := "event: endpoint\ndata: /messages?id=1\n\n"
	other := "event: other\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"
	// An escaped key hides the method from the quick scan, not from the SDK.
	escaped := "data: {\"jsonrpc\":\"2.0\",\"\\u006dethod\":\"notifications/progress\",\"params\":{}}\n\n"
	unasked := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n\n"
	garbage := "data: {\"x\":1}\n\n"
	empty := ": nothing\n\n"
	in := endpoint + note + note + resp + note + req + other + note + escaped + escaped + unasked + garbage + empty + endpoint
	var dropped atomic.Int64
	f := &eventFilter{body: io.NopCloser(strings.NewReader(in)), max: DefaultMaxResult, notes: NewNoteLimiter(0.001, 1, &dropped, nil), asked: &AskedIDs{}, closed: make(chan struct{})}
	f.asked.Add(&jsonrpc.Request{ID: mustID(t, 3), Method: "tools/call"})
	f.in = newEventReader(f.body)
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := endpoint + note + resp; string(out) != want {
		t.Errorf("passed on:\n%q\nwant:\n%q", out, want)
	}
	if dropped.Load() != 11 {
		t.Errorf("dropped %d, want 11 (three of four notifications, one request, another event, two escaped, an answer to nothing, data that is no message, an empty event, a second endpoint)", dropped.Load())
	}
}

// An event past the bound is not held whole: the filter holds no more of it
// than the bound, skips the rest unread, answers a response in its place with
// the "result too large" error for its id and passes on the events after it; a
// notification over the bound is dropped. Each is told, with its size.
func TestEventFilterHoldsAtMostOneBoundedEvent(t *testing.T) {
	const bound = 1 << 20
	note := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"
	answer := "data: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n"
	bigAnswer := "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" + strings.Repeat("x", 5*bound) + "\"}]}}\r\n\r\n"
	bigNote := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\n" + "data: \"params\":\"" + strings.Repeat("y", 3*bound) + "\"}\n\n"
	in := bigAnswer + note + bigNote + answer
	type told struct {
		id   string
		size int
	}
	var tells []told
	f := &eventFilter{body: io.NopCloser(strings.NewReader(in)), max: bound, closed: make(chan struct{}),
		tooLarge: func(id string, size int) { tells = append(tells, told{id, size}) }}
	f.in = newEventReader(f.body)
	var out []byte
	held := 0
	for buf := make([]byte, 32<<10); ; {
		n, err := f.Read(buf)
		out, held = append(out, buf[:n]...), max(held, cap(f.ev), cap(f.data))
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	want := "event: message\ndata: " + string(TooLargeAnswer([]byte("7"), bound)) + "\n\n" + note + answer
	if string(out) != want {
		t.Errorf("passed on %.300q, want %q", out, want)
	}
	if held > bound*3/2 {
		t.Errorf("the filter held %d bytes of one event, far over the %d bound", held, bound)
	}
	if len(tells) != 2 || tells[0].id != "7" || tells[0].size != len(bigAnswer) || tells[1].id != "" || tells[1].size != len(bigNote) {
		t.Errorf("told %+v, want the answer to 7 (%d bytes) and the notification (%d bytes)", tells, len(bigAnswer), len(bigNote))
	}
}
