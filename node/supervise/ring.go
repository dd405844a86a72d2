package supervise

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// LogOptions bound a server's log on disk.
type LogOptions struct {
	// Path receives the server's stderr (0600); "" keeps none on disk.
	Path string
	// MaxBytes is the size at which the log is rotated (Path → Path.1 → …);
	// Files is how many files are kept in all, the current one included.
	MaxBytes int64
	Files    int
	// FloodBytes is how much a server may write within FloodWindow; the rest of
	// that window's output is dropped, counted and marked in the log.
	FloodBytes  int64
	FloodWindow time.Duration
	// OnFlood is called (without the ring's lock) when a server starts flooding,
	// once per flood, with the bytes dropped so far in all.
	OnFlood func(droppedTotal int64)
	Now     func() time.Time
}

func (o *LogOptions) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 4 << 20
	}
	if o.Files <= 0 {
		o.Files = 4
	}
	if o.FloodBytes <= 0 {
		o.FloodBytes = 1 << 20
	}
	if o.FloodWindow <= 0 {
		o.FloodWindow = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Ring keeps the last N lines a server wrote to stderr, and appends its output to
// a private log file, so a crash can be explained from memory and from logs/. The
// file is rotated by size and a server that writes faster than its budget has the
// excess dropped (counted, marked in the log): a runaway server cannot fill the
// disk.
type Ring struct {
	mu      sync.Mutex
	lines   []string
	next    int
	full    bool
	partial []byte
	subs    map[chan string]struct{}

	log      LogOptions
	file     *os.File
	size     int64     // bytes in the current file
	winStart time.Time // the current flood window
	winBytes int64     // bytes accepted within it
	dropping int64     // bytes dropped within the current flood, not yet marked
	flooding bool      // the current flood was reported
	dropped  int64     // bytes dropped in all
	floods   int       // floods in all
}

// NewRing keeps n lines in memory and writes the log as lo says.
func NewRing(n int, lo LogOptions) *Ring {
	lo.defaults()
	r := &Ring{lines: make([]string, n), subs: map[chan string]struct{}{}, log: lo}
	if lo.Path != "" {
		if f, err := os.OpenFile(lo.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			r.file = f
			if fi, err := f.Stat(); err == nil {
				r.size = fi.Size()
			}
		}
	}
	return r
}

// Dropped returns the bytes of output dropped in all and how many floods there were.
func (r *Ring) Dropped() (bytes int64, floods int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped, r.floods
}

// Write implements io.Writer; lines longer than 4 KiB are cut so one runaway line
// cannot hold memory.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	report := r.account(len(p))
	r.mu.Unlock()
	if report >= 0 && r.log.OnFlood != nil {
		r.log.OnFlood(report)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropping == 0 {
		r.writeFile(p)
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

// account charges n bytes to the flood window. Over budget, they are dropped (and
// r.dropping > 0 after it returns). It returns the total dropped when a new flood
// begins (to be reported), else -1.
func (r *Ring) account(n int) int64 {
	now := r.log.Now()
	if now.Sub(r.winStart) >= r.log.FloodWindow {
		if r.dropping > 0 {
			// The flood's window is over: say in the log what is missing.
			r.writeFile(fmt.Appendf(nil, "[oz0-node: %d bytes of this server's output dropped: it wrote more than %d bytes within %s]\n",
				r.dropping, r.log.FloodBytes, r.log.FloodWindow))
			r.dropping = 0
		} else {
			r.flooding = false // a quiet window ends the flood
		}
		r.winStart, r.winBytes = now, 0
	}
	if r.dropping == 0 && r.winBytes+int64(n) <= r.log.FloodBytes {
		r.winBytes += int64(n)
		return -1
	}
	r.dropping += int64(n)
	r.dropped += int64(n)
	if !r.flooding {
		r.flooding = true
		r.floods++
		return r.dropped
	}
	return -1
}

// writeFile appends p to the log, rotating first when it would pass MaxBytes.
func (r *Ring) writeFile(p []byte) {
	if r.file == nil {
		return
	}
	if int64(len(p)) > r.log.MaxBytes {
		p = p[:r.log.MaxBytes]
	}
	if r.size > 0 && r.size+int64(len(p)) > r.log.MaxBytes {
		r.rotate()
		if r.file == nil {
			return
		}
	}
	n, _ := r.file.Write(p)
	r.size += int64(n)
}

// rotate shifts Path.(i) to Path.(i+1), dropping the oldest, and starts Path anew.
func (r *Ring) rotate() {
	r.file.Close()
	r.file = nil
	base := r.log.Path
	os.Remove(fmt.Sprintf("%s.%d", base, r.log.Files-1))
	for i := r.log.Files - 2; i >= 1; i-- {
		os.Rename(fmt.Sprintf("%s.%d", base, i), fmt.Sprintf("%s.%d", base, i+1))
	}
	if r.log.Files > 1 {
		os.Rename(base, base+".1")
	} else {
		os.Remove(base)
	}
	f, err := os.OpenFile(base, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	r.file, r.size = f, 0
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

// Close closes the log file, marking output dropped since the last mark.
func (r *Ring) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dropping > 0 {
		r.writeFile(fmt.Appendf(nil, "[oz0-node: %d bytes of this server's output dropped: it wrote more than %d bytes within %s]\n",
			r.dropping, r.log.FloodBytes, r.log.FloodWindow))
		r.dropping = 0
	}
	if r.file != nil {
		return r.file.Close()
	}
	return nil
}

var _ io.Writer = (*Ring)(nil)
