package tui

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is an output the test reads while the TUI writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRun: Run draws the node and returns nil on q, and on its context ending.
func TestRun(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	for _, how := range []string{"q", "ctx"} {
		t.Run(how, func(t *testing.T) {
			inR, inW := io.Pipe()
			defer inW.Close()
			out := &syncBuffer{}
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
