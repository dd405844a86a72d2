// Package logring keeps the node's own latest log records in memory, one text line
// each, for `oz0-node logs` over the control API: a slog handler tees every record
// into the ring while the configured handler still writes stderr.
package logring

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Ring holds the last lines and feeds followers.
type Ring struct {
	mu    sync.Mutex
	max   int
	lines []string
	next  int // where the next line goes once the ring is full
	subs  map[chan string]struct{}
}

// New returns a ring of max lines.
func New(max int) *Ring {
	return &Ring{max: max, subs: map[chan string]struct{}{}}
}

// Add appends one line and hands it to followers (a slow follower misses lines
// rather than holding up the node's logging).
func (r *Ring) Add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < r.max {
		r.lines = append(r.lines, line)
	} else {
		r.lines[r.next] = line
		r.next = (r.next + 1) % r.max
	}
	for c := range r.subs {
		select {
		case c <- line:
		default:
		}
	}
}

// Last returns up to n of the newest lines, oldest first.
func (r *Ring) Last(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := append(append([]string{}, r.lines[r.next:]...), r.lines[:r.next]...)
	if n < len(all) {
		all = all[len(all)-n:]
	}
	return all
}

// Follow streams each new line until cancel.
func (r *Ring) Follow() (<-chan string, func()) {
	c := make(chan string, 256)
	r.mu.Lock()
	r.subs[c] = struct{}{}
	r.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.subs, c)
			r.mu.Unlock()
		})
	}
}

// Handler returns a handler that writes each record to next and, as a text line,
// to the ring.
func (r *Ring) Handler(next slog.Handler) slog.Handler {
	return &tee{next: next, text: slog.NewTextHandler(writer{r}, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

type tee struct{ next, text slog.Handler }

func (t *tee) Enabled(ctx context.Context, l slog.Level) bool { return t.next.Enabled(ctx, l) }

func (t *tee) Handle(ctx context.Context, rec slog.Record) error {
	t.text.Handle(ctx, rec.Clone())
	return t.next.Handle(ctx, rec)
}

func (t *tee) WithAttrs(as []slog.Attr) slog.Handler {
	return &tee{next: t.next.WithAttrs(as), text: t.text.WithAttrs(as)}
}

func (t *tee) WithGroup(name string) slog.Handler {
	return &tee{next: t.next.WithGroup(name), text: t.text.WithGroup(name)}
}

// writer takes the text handler's output: one record per Write.
type writer struct{ r *Ring }

func (w writer) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.r.Add(l)
	}
	return len(p), nil
}
