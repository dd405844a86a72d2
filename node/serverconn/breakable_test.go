package serverconn_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/serverconn"
)

// A server that never answers cannot hold its session: breaking the
// connection ends the call in flight with the cause given.
func TestBreakEndsACallTheServerNeverAnswers(t *testing.T) {
	stuck := make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "stuck", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-stuck
			return &mcp.CallToolResult{}, nil
		})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(stuck); ss.Close() }()
	tr := &serverconn.Breakable{Inner: ct}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "node", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Broken() == nil || tr.Broken().Err() != nil {
		t.Fatal("a connected transport's Broken is not a live context")
	}
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{}})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cause := errors.New("the server was restarted")
	tr.Break(cause)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the call in flight was answered after the break")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight outlived the break")
	}
	if !errors.Is(context.Cause(tr.Broken()), cause) {
		t.Errorf("Broken's cause: %v", context.Cause(tr.Broken()))
	}
}
