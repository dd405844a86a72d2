package tui

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/internal/syncbuf"
)

// TestRun: Run draws the node and returns nil on q, and on its context ending.
func TestRun(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	for _, how := range []string{"q", "ctx"} {
		t.Run(how, func(t *testing.T) {
			inR, inW := io.Pipe()
			defer inW.Close()
			out := &syncbuf.Buffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Run(ctx, sock, Options{In: inR, Out: out, NoColor: true}) }()
			waitFor(t, 5*time.Second, "the TUI to draw the node", func() bool { return strings.Contains(out.String(), "host-health") })
			if how == "q" {
				inW.Write([]byte("q"))
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return")
			}
		})
	}
}
