package supervise

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// Ring keeps the last N lines a server wrote to stderr, and appends every line to a
// private log file, so a crash can be explained from memory and from logs/.
type Ring struct {
	mu      sync.Mutex
	lines   []string
	next    int
	full    bool
	partial []byte
	file    *os.File
	subs    map[chan string]struct{}
}

// NewRing keeps n lines; logPath ("" for none) receives every line (0600).
func NewRing(n int, logPath string) *Ring {
	r := &Ring{lines: make([]string, n), subs: map[chan string]struct{}{}}
	if logPath != "" {
		if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			r.file = f
		}
	}
	return r
}

// Write implements io.Writer; lines longer than 4 KiB are cut so one runaway line
// cannot hold memory.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file != nil {
		r.file.Write(p)
	}
	data := append(r.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		r.add(string(data[:i]))
		data = data[i+1:]
	}
	if len(data) > 4096 {
		r.add(string(data[:4096]))
		data = nil
	}
	r.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (r *Ring) add(line string) {
	r.lines[r.next] = line
	r.next = (r.next + 1) % len(r.lines)
	if r.next == 0 {
		r.full = true
	}
	for c := range r.subs {
		select {
		case c <- line:
		default: // a slow follower loses lines rather than stalling the server
		}
	}
}

// Lines returns up to the last n lines, oldest first.
func (r *Ring) Lines(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	if r.full {
		all = append(all, r.lines[r.next:]...)
	}
	all = append(all, r.lines[:r.next]...)
	if n > 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return append([]string(nil), all...)
}

// Follow returns a channel of new lines until cancel is called.
func (r *Ring) Follow() (<-chan string, func()) {
	c := make(chan string, 256)
	r.mu.Lock()
	r.subs[c] = struct{}{}
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		delete(r.subs, c)
		r.mu.Unlock()
	}
}

// Close closes the log file.
func (r *Ring) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file != nil {
		return r.file.Close()
	}
	return nil
}

var _ io.Writer = (*Ring)(nil)
