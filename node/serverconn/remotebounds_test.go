package serverconn

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bigReply is what a hostile remote server answers a call of its "big" tool
// with: far over the node's per-message bound.
const bigReply = 50 << 20

// remoteServer is a real go-sdk server whose "small" tool answers normally and
// whose "big" tool's answer the test writes itself, streamed from one reused
// chunk so that the server side allocates next to nothing: what the process
// allocates during the call is the node's (its client and its proxy).
func remoteServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "small"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "small answer"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "big"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, fmt.Errorf("the test answers big itself")
	})
	return s
}

var xs = bytes.Repeat([]byte("x"), 64<<10)

// writeHuge writes a tools/call result for id whose text is n bytes; idLast
// puts the id after the result.
func writeHuge(w io.Writer, id json.RawMessage, n int, idLast bool) {
	if idLast {
		io.WriteString(w, `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"`)
	} else {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
	}
	for n > 0 {
		k := min(n, len(xs))
		if _, err := w.Write(xs[:k]); err != nil {
			return // the node hung up: it reads no further
		}
		n -= k
	}
	if idLast {
		fmt.Fprintf(w, `"}]},"id":%s}`, id)
	} else {
		io.WriteString(w, `"}]}}`)
	}
}

// bigCall reports the id of r's JSON-RPC request when it calls the big tool
// (and remembers it), leaving r's body readable again otherwise.
func (s *sseStream) bigCall(r *http.Request) (json.RawMessage, bool) {
	if r.Method != http.MethodPost {
		return nil, false
	}
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(b, &m) != nil || m.Method != "tools/call" || m.Params.Name != "big" {
		return nil, false
	}
	s.mu.Lock()
	s.bigID = string(m.ID)
	s.mu.Unlock()
	return m.ID, true
}

// sseStream is the legacy SSE transport's event stream (the GET), shared with
// the test so that it can put an event of its own on it between the SDK's.
type sseStream struct {
	http.ResponseWriter
	mu     sync.Mutex
	retype string // a Content-Type named instead of the SDK's
	bigID  string // the id of the last call of the big tool
}

func (s *sseStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retype != "" {
		s.Header().Set("Content-Type", s.retype)
	}
	return s.ResponseWriter.Write(b)
}

func (s *sseStream) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retype != "" {
		s.Header().Set("Content-Type", s.retype)
	}
	s.ResponseWriter.WriteHeader(code)
}

// Flush holds the lock too: the SDK flushes from its own goroutines while event
// writes onto the same stream.
func (s *sseStream) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	http.NewResponseController(s.ResponseWriter).Flush()
}

// event writes one event of its own onto the stream.
func (s *sseStream) event(write func(w io.Writer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	io.WriteString(s.ResponseWriter, "event: message\ndata: ")
	write(s.ResponseWriter)
	io.WriteString(s.ResponseWriter, "\n\n")
	http.NewResponseController(s.ResponseWriter).Flush()
}

// A remote server's reply over the bound, as a JSON body or as an event, is a
// "result too large" error for its call, told once with its id; the node reads
// no more of it than the bound (what the process allocates over the call is far
// under the reply's size), and the session goes on for the next call. Each of
// the shapes a hostile server may answer in: Streamable HTTP with a JSON body
// (announcing its length or not, as an error status's body, or compressed), with an event
// stream (the id first or last), and the SSE transport's stream (naming its
// type or another); on that stream a notification over the bound is dropped.
func TestRemoteRepliesOverTheBoundAreCallErrors(t *testing.T) {
	sock := proxyFor(t, true)
	srv := remoteServer()
	streamable := func(json bool) http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{JSONResponse: json, DisableLocalhostProtection: true})
	}
	type shape struct {
		name string
		// serve answers the big call itself and everything else through the
		// SDK's handler; sse is nil for the Streamable HTTP shapes.
		serve func(stream *sseStream) http.Handler
		sse   bool
		// retype names another Content-Type on the SSE transport's stream.
		retype string
	}
	jsonBody := func(status int, announce bool) func(*sseStream) http.Handler {
		return func(s *sseStream) http.Handler {
			sdk := streamable(true)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id, ok := s.bigCall(r)
				if !ok {
					sdk.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				if announce {
					w.Header().Set("Content-Length", fmt.Sprint(bigReply+len(id)+80))
				}
				w.WriteHeader(status)
				writeHuge(w, id, bigReply, false)
			})
		}
	}
	// A body compressed a thousandfold: the transport inflates it as it is read,
	// and the bound counts what it inflates to.
	gzipBody := func(s *sseStream) http.Handler {
		sdk := streamable(true)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, ok := s.bigCall(r)
			if !ok {
				sdk.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
			writeHuge(zw, id, bigReply, false)
			zw.Close()
		})
	}
	eventStream := func(idLast bool) func(*sseStream) http.Handler {
		return func(s *sseStream) http.Handler {
			sdk := streamable(false)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id, ok := s.bigCall(r)
				if !ok {
					sdk.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "event: message\ndata: ")
				writeHuge(w, id, bigReply, idLast)
				io.WriteString(w, "\n\n")
			})
		}
	}
	legacy := func(stream *sseStream) http.Handler {
		sdk := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.SSEOptions{DisableLocalhostProtection: true})
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				stream.ResponseWriter = w
				sdk.ServeHTTP(stream, r)
				return
			}
			id, ok := stream.bigCall(r)
			if !ok {
				sdk.ServeHTTP(w, r)
				return
			}
			w.WriteHeader(http.StatusAccepted)
			go stream.event(func(w io.Writer) { writeHuge(w, id, bigReply, false) })
		})
	}
	for _, sh := range []shape{
		{name: "streamable, JSON body", serve: jsonBody(http.StatusOK, false)},
		{name: "streamable, JSON body of announced length", serve: jsonBody(http.StatusOK, true)},
		{name: "streamable, error status with a JSON body", serve: jsonBody(http.StatusBadRequest, false)},
		{name: "streamable, compressed JSON body", serve: gzipBody},
		{name: "streamable, event stream", serve: eventStream(false)},
		{name: "streamable, event stream with the id last", serve: eventStream(true)},
		{name: "SSE transport", serve: legacy, sse: true},
		{name: "SSE transport naming another type", serve: legacy, sse: true, retype: "application/octet-stream"},
	} {
		t.Run(sh.name, func(t *testing.T) {
			stream := &sseStream{retype: sh.retype}
			remote := httptest.NewServer(sh.serve(stream))
			defer remote.Close()
			var mu sync.Mutex
			var told []string
			hc := RemoteClient(sock, nil, Limits{Max: DefaultMaxResult, TooLarge: func(id string, size int) {
				mu.Lock()
				told = append(told, fmt.Sprintf("%s:%d", id, size))
				mu.Unlock()
			}})
			url := "http://a.test:" + portOf(remote)
			var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, MaxRetries: -1}
			if sh.sse {
				tr = &mcp.SSEClientTransport{Endpoint: url + "/sse", HTTPClient: hc}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "node", Version: "1"}, nil).Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			callSmall := func(when string) {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "small"})
				if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "small answer" {
					t.Fatalf("small %s: %v %+v", when, err, res)
				}
			}
			callSmall("before")
			if sh.sse {
				// A notification over the bound on the shared stream is
				// dropped; the stream goes on.
				stream.event(func(w io.Writer) {
					io.WriteString(w, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`)
					w.Write(bytes.Repeat([]byte("y"), 9<<20))
					io.WriteString(w, `"}}`)
				})
				callSmall("after a notification over the bound")
			}

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "big"})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			runtime.GC()
			runtime.ReadMemStats(&after)
			t.Logf("big: %v %v in %v; %.1f MiB allocated over the call, heap %+.1f MiB after it", err, res, took,
				float64(allocated)/(1<<20), (float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20))
			if err == nil || !strings.Contains(err.Error(), "result too large: over 8 MiB") {
				t.Errorf("a %d MiB reply: %v %+v, want the call's error 'result too large'", bigReply>>20, err, res)
			}
			if allocated > bigReply/2 {
				t.Errorf("the process allocated %.1f MiB over a call answered with %d MiB: the reply was read past the %d MiB bound",
					float64(allocated)/(1<<20), bigReply>>20, DefaultMaxResult>>20)
			}
			callSmall("after")
			mu.Lock()
			defer mu.Unlock()
			wantTold := 1
			if sh.sse {
				wantTold = 2 // the notification too
			}
			stream.mu.Lock()
			id := stream.bigID
			stream.mu.Unlock()
			if len(told) != wantTold || !strings.HasPrefix(told[len(told)-1], id+":") {
				t.Errorf("told %v, want %d, the last with the big call's id %s", told, wantTold, id)
			}
		})
	}
}
