package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawServer stands in for a plugin server's stdio connection (RawBackend): a
// call whose arguments say "hang" waits until its context ends and reports the
// cause it ended with, as serverconn.LineConn does; any other is answered at
// once.
type rawServer struct {
	started chan string // a hanging call's arguments, once it waits
	mu      sync.Mutex
	causes  map[string]string // a hanging call's arguments → the cause it ended with
}

func newRawServer() *rawServer {
	return &rawServer{started: make(chan string, 64), causes: map[string]string{}}
}

var echoResult = json.RawMessage(`{"content":[{"type":"text","text":"x"}]}`)

func (s *rawServer) CallTool(ctx context.Context, params []byte) (*jsonrpc.Response, error) {
	if !bytes.Contains(params, []byte("hang")) {
		return &jsonrpc.Response{Result: echoResult}, nil
	}
	var p struct {
		Arguments struct{ Tag string } `json:"arguments"`
	}
	json.Unmarshal(params, &p)
	s.started <- p.Arguments.Tag
	<-ctx.Done()
	cause := context.Cause(ctx)
	s.mu.Lock()
	s.causes[p.Arguments.Tag] = cause.Error()
	s.mu.Unlock()
	return nil, cause
}

func (s *rawServer) cause(tag string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.causes[tag]
}

// waitStarted waits until the hanging calls tagged want all wait in the server.
func (s *rawServer) waitStarted(t testing.TB, want ...string) {
	t.Helper()
	for range want {
		select {
		case <-s.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("the hanging calls %q did not all reach the server", want)
		}
	}
}

// withID gives the connections of a transport a session id, as Streamable
// HTTP's have; "" leaves them without, as the stdio door's.
type withID struct {
	mcp.Transport
	id string
}

func (t withID) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return idConn{c, t.id}, nil
}

type idConn struct {
	mcp.Connection
	id string
}

func (c idConn) SessionID() string { return c.id }

// fastGateway is a gateway with the options the node gives its own, serving
// p__echo and p__hang of a server that takes calls as bytes (raw).
func fastGateway(t testing.TB, raw RawBackend) *Gateway {
	t.Helper()
	return fastGatewayWith(t, raw, Options{
		Check:       func(context.Context, Call) Verdict { return Verdict{OK: true} },
		Observe:     func(*CallRecord) {},
		OnCall:      func(string, string, time.Duration) {},
		CallTimeout: time.Minute,
	})
}

// fastGatewayWith is fastGateway with options of the test's own.
func fastGatewayWith(t testing.TB, raw RawBackend, opts Options) *Gateway {
	t.Helper()
	g := New(opts)
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := newPluginServer("p", "echo", "hang").srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := g.Client("p", "main").Connect(ctx, ct, SessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if err := g.AttachRaw(ctx, "p", "main", cs, raw, nil); err != nil {
		t.Fatal(err)
	}
	return g
}

// callerSession is an initialised caller session of g; id is its HTTP session
// id ("" for one of the stdio door).
func callerSession(t testing.TB, g *Gateway, id string) *mcp.ServerSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(ctx, withID{st, id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, nil).Connect(ctx, withID{ct, id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return ss
}

func toolsCall(t testing.TB, id any, tool, args string) *jsonrpc.Request {
	t.Helper()
	if n, ok := id.(int); ok {
		id = float64(n)
	}
	jid, err := jsonrpc.MakeID(id)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonrpc.Request{ID: jid, Method: "tools/call", Params: json.RawMessage(`{"name":"` + tool + `","arguments":` + args + `}`)}
}

// runFast runs a call on the fast path in the background; its answer comes on
// the channel (nil: none is due).
func runFast(t testing.TB, g *Gateway, ss *mcp.ServerSession, req *jsonrpc.Request) <-chan *jsonrpc.Response {
	t.Helper()
	fc, ok := g.Fast(ss, req)
	if !ok {
		t.Fatalf("the call %v did not take the fast path", req.ID)
	}
	out := make(chan *jsonrpc.Response, 1)
	go func() { out <- fc.Run(context.Background()) }()
	return out
}

func hang(tag string) string { return `{"hang":true,"tag":"` + tag + `"}` }

// ended waits for a call's end and says whether it answered.
func ended(t *testing.T, what string, ch <-chan *jsonrpc.Response) *jsonrpc.Response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not end", what)
		return nil
	}
}

func stillRunning(t *testing.T, what string, ch <-chan *jsonrpc.Response) {
	t.Helper()
	select {
	case r := <-ch:
		t.Errorf("%s ended (answer %v)", what, r)
	case <-time.After(100 * time.Millisecond):
	}
}

// Ending an HTTP session (its client's DELETE) ends its calls in flight on both
// paths, with the cause named, and no other session's.
func TestSessionEndEndsItsCalls(t *testing.T) {
	raw := newRawServer()
	g := fastGateway(t, raw)
	a, b := callerSession(t, g, "session-a"), callerSession(t, g, "session-b")
	stdio := callerSession(t, g, "")

	a1 := runFast(t, g, a, toolsCall(t, 1, "p__hang", hang("a1")))
	a2 := runFast(t, g, a, toolsCall(t, "two", "p__hang", hang("a2")))
	b1 := runFast(t, g, b, toolsCall(t, 1, "p__hang", hang("b1")))
	s1 := runFast(t, g, stdio, toolsCall(t, 1, "p__hang", hang("s1")))
	raw.waitStarted(t, "a1", "a2", "b1", "s1")

	g.EndSession("session-a")
	for what, ch := range map[string]<-chan *jsonrpc.Response{"a1": a1, "a2": a2} {
		if r := ended(t, what, ch); r != nil {
			t.Errorf("%s answered after its session ended: %+v", what, r)
		}
		if got := raw.cause(what); got != "the MCP session was closed by its client" {
			t.Errorf("%s ended with %q; want its session's end named", what, got)
		}
	}
	stillRunning(t, "the other session's call", b1)
	g.EndSession("") // no session has no id: the stdio door's calls are not its
	stillRunning(t, "the other session's call", b1)
	stillRunning(t, "the stdio session's call", s1)
	g.EndSession("session-b")
	ended(t, "b1", b1)
	g.cancelFast(stdio, &mcp.CancelledParams{RequestID: float64(1)})
	ended(t, "s1", s1)
	if n := callsInFlight(g); n != 0 {
		t.Errorf("%d calls still registered once all ended", n)
	}
}

// A caller's notifications/cancelled ends exactly the fast call it names: not a
// call of another session under the same id, nor one under another id.
func TestCallerCancelEndsExactlyItsCall(t *testing.T) {
	for _, door := range []struct{ name, a, b string }{{"stdio", "", ""}, {"http", "session-a", "session-b"}} {
		t.Run(door.name, func(t *testing.T) {
			raw := newRawServer()
			g := fastGateway(t, raw)
			a, b := callerSession(t, g, door.a), callerSession(t, g, door.b)
			a5 := runFast(t, g, a, toolsCall(t, 5, "p__hang", hang("a5")))
			a6 := runFast(t, g, a, toolsCall(t, "6", "p__hang", hang("a6")))
			b5 := runFast(t, g, b, toolsCall(t, 5, "p__hang", hang("b5")))
			raw.waitStarted(t, "a5", "a6", "b5")

			g.cancelFast(a, &mcp.CancelledParams{RequestID: "5"}) // a string: not the number 5
			g.cancelFast(a, &mcp.CancelledParams{RequestID: float64(7)})
			stillRunning(t, "a5 (another id cancelled)", a5)
			g.cancelFast(a, &mcp.CancelledParams{RequestID: float64(5)})
			if r := ended(t, "a5", a5); r != nil {
				t.Errorf("a5 answered after its caller cancelled it: %+v", r)
			}
			if got := raw.cause("a5"); got != context.Canceled.Error() {
				t.Errorf("a5 ended with %q; want %q", got, context.Canceled)
			}
			stillRunning(t, "a6", a6)
			stillRunning(t, "b5", b5)
			g.cancelFast(a, &mcp.CancelledParams{RequestID: "6"})
			g.cancelFast(b, &mcp.CancelledParams{RequestID: float64(5)})
			ended(t, "a6", a6)
			ended(t, "b5", b5)
			if n := callsInFlight(g); n != 0 {
				t.Errorf("%d calls still registered once all ended", n)
			}
		})
	}
}

// A caller that sends a call under an id still in flight: its cancellation ends
// the later call, as the latest under that id; the earlier one still ends with
// its session.
func TestCallerCancelOfAnIDInFlightTwice(t *testing.T) {
	raw := newRawServer()
	g := fastGateway(t, raw)
	a := callerSession(t, g, "session-a")
	first := runFast(t, g, a, toolsCall(t, 9, "p__hang", hang("first")))
	raw.waitStarted(t, "first")
	second := runFast(t, g, a, toolsCall(t, 9, "p__hang", hang("second")))
	raw.waitStarted(t, "second")
	g.cancelFast(a, &mcp.CancelledParams{RequestID: float64(9)})
	ended(t, "the later call", second)
	stillRunning(t, "the earlier call", first)
	g.cancelFast(a, &mcp.CancelledParams{RequestID: float64(9)})
	stillRunning(t, "the earlier call", first)
	g.EndSession("session-a")
	ended(t, "the earlier call", first)
	if got := raw.cause("first"); got != "the MCP session was closed by its client" {
		t.Errorf("the earlier call ended with %q", got)
	}
	if n := callsInFlight(g); n != 0 {
		t.Errorf("%d calls still registered once all ended", n)
	}
}

// Many sessions' calls, answered, leave nothing registered behind.
func TestCallsLeaveNothingBehind(t *testing.T) {
	g := fastGateway(t, newRawServer())
	for i := range 50 {
		ss := callerSession(t, g, fmt.Sprintf("session-%d", i))
		for j := range 3 {
			if r := ended(t, "a call", runFast(t, g, ss, toolsCall(t, j, "p__echo", `{}`))); r == nil || !strings.Contains(string(r.Result), `"x"`) {
				t.Fatalf("answer %+v", r)
			}
		}
	}
	if n := callsInFlight(g); n != 0 {
		t.Errorf("%d calls still registered once all were answered", n)
	}
}

// BenchmarkFastCall is the gateway's own work for one call on the fast path,
// with the options the node sets, of a server that answers at once; "-meta"
// with a _meta as clients send it.
func BenchmarkFastCall(b *testing.B) {
	for _, door := range []struct{ name, id, meta string }{
		{"stdio", "", ""}, {"http", "0123456789abcdef0123456789abcdef", ""},
		{"stdio-meta", "", `{"claudecode/toolUseId":"toolu_01ABCDEFGHIJKLMNOPQRSTUV"}`},
	} {
		b.Run(door.name, func(b *testing.B) {
			g := fastGateway(b, newRawServer())
			ss := callerSession(b, g, door.id)
			req := toolsCall(b, 1, "p__echo", `{"text":"x"}`)
			if door.meta != "" {
				req.Params = json.RawMessage(`{"name":"p__echo","arguments":{"text":"x"},"_meta":` + door.meta + `}`)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				fc, ok := g.Fast(ss, req)
				if !ok {
					b.Fatal("not on the fast path")
				}
				if r := fc.Run(ctx); r == nil {
					b.Fatal("no answer")
				}
			}
		})
	}
}

// A fast call its server does not answer within the node's call deadline
// answers with an error naming the server and the deadline, and the node is
// told; one its caller cancels first is no timeout.
func TestFastCallDeadline(t *testing.T) {
	raw := newRawServer()
	var mu sync.Mutex
	var told []string
	outcomes := make(chan string, 4)
	g := fastGatewayWith(t, raw, Options{
		Observe:     func(r *CallRecord) { outcomes <- r.Outcome },
		CallTimeout: 300 * time.Millisecond,
		OnCallTimeout: func(plugin, server string) {
			mu.Lock()
			told = append(told, plugin+"/"+server)
			mu.Unlock()
		},
	})
	ss := callerSession(t, g, "session-a")
	start := time.Now()
	late := runFast(t, g, ss, toolsCall(t, 1, "p__hang", hang("late")))
	raw.waitStarted(t, "late")
	r := ended(t, "the call past its deadline", late)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("the call ended after %v, before its deadline", took)
	}
	want := "call hang on p/main: call deadline passed: server p/main did not answer within the node's call deadline of 300ms (--call-timeout); the call was cancelled"
	if r == nil || !strings.Contains(string(r.Result), want) || !strings.Contains(string(r.Result), `"isError":true`) {
		t.Errorf("the call past its deadline answered %+v; want %q", r, want)
	}
	if got := <-outcomes; got != "no-answer" {
		t.Errorf("its outcome %q; want no-answer", got)
	}
	if got := raw.cause("late"); !strings.HasPrefix(got, "call deadline passed: server p/main") {
		t.Errorf("the server's call ended with %q; want the deadline", got)
	}

	cancelled := runFast(t, g, ss, toolsCall(t, 2, "p__hang", hang("cancelled")))
	raw.waitStarted(t, "cancelled")
	g.cancelFast(ss, &mcp.CancelledParams{RequestID: float64(2)})
	if r := ended(t, "the cancelled call", cancelled); r != nil {
		t.Errorf("the cancelled call answered %+v", r)
	}
	if got := <-outcomes; got != "cancelled" {
		t.Errorf("its outcome %q; want cancelled", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != "p/main" {
		t.Errorf("the node was told of timeouts %q; want p/main once", told)
	}
}

// A call on the SDK's path ends with its HTTP session too.
func TestSessionEndEndsItsSDKCall(t *testing.T) {
	g := New(Options{})
	s := newPluginServer("p", "echo")
	waiting := make(chan struct{}, 1)
	s.srv.AddTool(&mcp.Tool{Name: "hang", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			waiting <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	attachInMemory(t, g, "p", "main", s)
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(ctx, withID{st, "session-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "caller", Version: "1"}, nil).Connect(ctx, withID{ct, "session-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	out := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "p__hang"})
		if err != nil {
			out <- err.Error()
			return
		}
		out <- text(res)
	}()
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not reach the server")
	}
	if n := callsInFlight(g); n != 1 {
		t.Errorf("%d calls registered while one is in flight", n)
	}
	g.EndSession("session-a")
	select {
	case got := <-out:
		if !strings.Contains(got, "call hang on p/main") {
			t.Errorf("the call answered %q; want its end named", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not end with its session")
	}
	if n := callsInFlight(g); n != 0 {
		t.Errorf("%d calls still registered once all ended", n)
	}
}

// callsInFlight is how many calls g holds registered.
func callsInFlight(g *Gateway) int {
	g.inFlight.mu.Lock()
	defer g.inFlight.mu.Unlock()
	return len(g.inFlight.m)
}
