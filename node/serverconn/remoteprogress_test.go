package serverconn

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/internal/progresscheck"
	"oz0.ai/node/node/gateway"
)

// A remote server's progress, sent on a call's event stream before its answer,
// reaches the caller before that answer and never after it, as a local
// server's does.
func TestRemoteProgressReachesTheCallerBeforeItsAnswer(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "step"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Message string `json:"message"`
	}) (*mcp.CallToolResult, any, error) {
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: in.Message})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	for _, kind := range []string{"streamable", "sse"} {
		t.Run(kind, func(t *testing.T) { remoteProgressInOrder(t, srv, kind) })
	}
}

func remoteProgressInOrder(t *testing.T, srv *mcp.Server, kind string) {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	if kind == "sse" {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.SSEOptions{DisableLocalhostProtection: true})
	}
	remote := httptest.NewServer(h)
	defer remote.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := gateway.New(gateway.Options{
		Check:       func(context.Context, gateway.Call) gateway.Verdict { return gateway.Verdict{OK: true} },
		CallTimeout: time.Minute,
	})
	progress := &ProgressWatch{}
	hc := RemoteClient(proxyFor(t, true), nil, Limits{Progress: progress})
	var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: "http://a.test:" + portOf(remote) + "/", HTTPClient: hc, MaxRetries: -1}
	if kind == "sse" {
		tr = &mcp.SSEClientTransport{Endpoint: "http://a.test:" + portOf(remote) + "/", HTTPClient: hc}
	}
	cs, err := g.Client("r", "main").Connect(ctx, tr, gateway.SessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := g.AttachRaw(ctx, "r", "main", cs, nil, progress); err != nil {
		t.Fatal(err)
	}

	// The caller speaks the stdio framing, read line by line.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss, err := g.Server().Connect(ctx, &mcp.IOTransport{Reader: inR, Writer: outW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	lines := make(chan []byte, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func(limit time.Duration) []byte {
		select {
		case b := <-lines:
			return b
		case <-time.After(limit):
			return nil
		}
	}
	send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if next(10*time.Second) == nil {
		t.Fatal("no answer to initialize")
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	progresscheck.InOrder(t, send, next, "r__step", 30)
}
