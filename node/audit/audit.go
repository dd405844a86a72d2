// Package audit is the node's one audit stream: every tool call, hook run, egress
// decision and operator approval as a line of JSON in <data>/logs/audit.jsonl
// (docs/audit.md). Lines are numbered one by one across every process that
// writes the stream (the node, and exec or hook serving their own proxy), the
// file is private (0600), rotated by size with the count of lines rotation
// removed kept in the new file's first line, and a line torn by a writer killed
// mid-write is cut before anything follows it.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	sjson "github.com/segmentio/encoding/json"

	"oz0.ai/node/node/api"
)

// Defaults bound the stream at (1 + DefaultKeep) × DefaultMaxBytes on disk.
const (
	DefaultMaxBytes = 64 << 20
	DefaultKeep     = 5
)

const (
	queue     = 4096
	batchMax  = 256 << 10
	syncEvery = time.Second
	// gather is how long a line added to an empty queue waits for others
	// before the writer wakes: each wake-up of the writer costs the node about
	// as much as writing the line, so under a stream of calls one wake-up takes
	// many lines (docs/performance.md, "The audit stream's hand-off").
	gather = 2 * time.Millisecond
	// maxText bounds each free-text field of a line (a rule, a reason), so a
	// line stays small whatever a plugin wrote.
	maxText = 1024
)

// Options configure a Stream; zero values take the defaults.
type Options struct {
	MaxBytes int64
	Keep     int
	Logger   *slog.Logger
	// OnWrite sees every line once it is written, with its number (the running
	// node's event stream).
	OnWrite func(api.AuditRecord)
}

// Stream appends records to the audit stream from one goroutine. Add puts a
// record on a bounded queue and blocks only when it is full: a disk slower than
// the node slows the node rather than losing lines. Lines are written within a
// few milliseconds, fsynced once a second and on Close.
type Stream struct {
	path string
	o    Options
	done chan struct{}
	log  *slog.Logger
	// flushAt fires gather after the queue's first line; wake tells the
	// writer the queue is full, or closed, to be written at once.
	flushAt *time.Timer
	wake    chan struct{}

	mu      sync.Mutex
	room    sync.Cond // the writer took the queue
	pending []api.AuditRecord
	waiting int  // Adds waiting for room
	closed  bool // a record added after Close is dropped

	// Owned by the writer goroutine.
	lock  *os.File // <path>.lock: every writer of the stream takes it to write
	f     *os.File
	size  int64  // f's size as this writer left it
	seq   uint64 // the last number written
	known bool   // size and seq are f's as they stand
	lost  uint64 // lines that could not be written, told in the next line
	cut   int64  // bytes of a torn line cut, told in the next line
	dirty bool
	fail  bool
	buf   []byte      // the batch's lines, kept between batches
	id    os.FileInfo // f's identity, nil until taken
	spare []api.AuditRecord
}

// Open opens (or creates) the stream at path and starts its writer.
func Open(path string, o Options) (*Stream, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Keep < 0 {
		o.Keep = 0
	} else if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit stream %s: %w", path, err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit stream %s: %w", path, err)
	}
	s := &Stream{path: path, o: o, wake: make(chan struct{}, 1), done: make(chan struct{}), log: o.Logger, lock: lock}
	s.room.L = &s.mu
	s.flushAt = time.NewTimer(time.Hour)
	s.flushAt.Stop()
	// Repair what a killed writer left now, under the lock, so the stream is
	// whole before anyone reads it.
	unlock := lockFile(lock)
	err = s.sync()
	var pending []api.AuditRecord
	if err == nil {
		pending, err = s.write(s.marks(nil))
	}
	unlock()
	if err != nil {
		lock.Close()
		if s.f != nil {
			s.f.Close()
		}
		return nil, fmt.Errorf("audit stream %s: %w", path, err)
	}
	s.told(pending)
	go s.run()
	return s, nil
}

// Path is the stream's live file.
func (s *Stream) Path() string { return s.path }

// Add queues a record; its number is given when it is written. Its time is now
// when it has none.
func (s *Stream) Add(r api.AuditRecord) {
	if s == nil {
		return
	}
	if r.Time == "" {
		r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	// An Add begun before Close keeps its record: the writer goes on until no
	// one waits for room.
	for len(s.pending) >= queue {
		s.waiting++
		s.signal()
		s.room.Wait()
		s.waiting--
	}
	s.pending = append(s.pending, r)
	if s.closed {
		s.signal()
	} else if len(s.pending) == 1 {
		s.flushAt.Reset(gather)
	}
	s.mu.Unlock()
}

// signal wakes the writer, or leaves it a token if it is busy.
func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close writes what is queued, fsyncs and closes the stream.
func (s *Stream) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.signal()
	}
	s.mu.Unlock()
	<-s.done
	return nil
}

// ArgsDigest is the SHA-256 of a call's arguments in compact JSON (whitespace
// between tokens removed), hex: the same arguments give the same digest on every
// path, and the digest is all the stream keeps of them.
func ArgsDigest(args json.RawMessage) string {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	// Compact only removes whitespace between tokens: arguments with no
	// whitespace byte at all are their own compact form (or, not JSON, taken as
	// they are either way).
	if bytes.ContainsAny(args, " \t\r\n") {
		var b bytes.Buffer
		if json.Compact(&b, args) == nil {
			args = b.Bytes()
		}
	}
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

func (s *Stream) run() {
	defer close(s.done)
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.flushAt.C:
		case <-s.wake:
		case <-tick.C:
			if s.dirty && s.f != nil {
				s.report(s.f.Sync())
				s.dirty = false
			}
			continue
		}
		s.mu.Lock()
		batch := s.pending
		s.pending, s.spare = s.spare[:0], nil
		last := s.closed && s.waiting == 0
		s.room.Broadcast()
		s.mu.Unlock()
		// Written batchMax at a time, as before the queue was a slice: one
		// write's buffer and lock hold stay that small whatever a burst queued.
		for rest := batch; len(rest) > 0; {
			n, size := 0, 0
			for n < len(rest) && size < batchMax {
				clip(&rest[n])
				size += 256 + len(rest[n].Rule)
				n++
			}
			s.flush(rest[:n])
			rest = rest[n:]
		}
		clear(batch) // let the lines' strings go
		s.spare = batch[:0]
		if last {
			s.finish()
			return
		}
	}
}

func (s *Stream) finish() {
	if s.f != nil {
		if s.dirty {
			s.report(s.f.Sync())
		}
		s.report(s.f.Close())
		s.f, s.id = nil, nil
	}
	s.lock.Close()
}

func (s *Stream) report(err error) {
	if err != nil && !s.fail {
		s.fail = true // once, not per line
		s.log.Error("audit stream: write failed", "path", s.path, "err", err)
	}
}

// flush writes a batch under the stream's lock, then tells OnWrite.
func (s *Stream) flush(batch []api.AuditRecord) {
	unlock := lockFile(s.lock)
	err := s.sync()
	var lines []api.AuditRecord
	if err == nil {
		lines, err = s.write(s.marks(batch))
	}
	unlock()
	if err != nil {
		s.report(err)
		s.lost += uint64(len(batch))
		s.known = false // read the file again before the next line
	}
	s.told(lines)
}

func (s *Stream) told(lines []api.AuditRecord) {
	if s.o.OnWrite == nil {
		return
	}
	for _, r := range lines {
		s.o.OnWrite(r)
	}
}

// marks puts before a batch the stream's own lines it owes: a torn line cut,
// lines lost.
func (s *Stream) marks(batch []api.AuditRecord) []api.AuditRecord {
	if s.cut == 0 && s.lost == 0 {
		return batch
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var out []api.AuditRecord
	if s.cut > 0 {
		out = append(out, api.AuditRecord{Time: now, Kind: "audit", Decision: "repaired", CutBytes: s.cut,
			Rule: "a line torn by a writer that was killed mid-write was cut"})
		s.cut = 0
	}
	if s.lost > 0 {
		out = append(out, api.AuditRecord{Time: now, Kind: "audit", Decision: "lost", LostLines: s.lost,
			Rule: "lines the disk did not take"})
		s.lost = 0
	}
	return append(out, batch...)
}

// write numbers lines and writes them, as many as fit before the file reaches
// its size in one write(2) on the O_APPEND file (so no other writer's line comes
// between), rotating there and going on in the new file. It returns the lines
// written, the rotations' own among them.
func (s *Stream) write(lines []api.AuditRecord) ([]api.AuditRecord, error) {
	var done []api.AuditRecord
	for len(lines) > 0 {
		buf := s.buf[:0]
		seq, n := s.seq, 0
		for n < len(lines) && s.size+int64(len(buf)) < s.o.MaxBytes {
			seq++
			lines[n].Seq = seq
			var err error
			if buf, err = appendLine(buf, &lines[n]); err != nil {
				return done, err // every field is a plain value: never
			}
			n++
		}
		if cap(buf) <= 64<<10 { // a rare large batch is not kept
			s.buf = buf
		}
		w, err := s.f.Write(buf)
		s.size += int64(w)
		if err != nil {
			return done, err
		}
		s.seq, s.dirty = seq, true
		done = append(done, lines[:n]...)
		lines = lines[n:]
		if s.size >= s.o.MaxBytes {
			mark, err := s.rotate()
			done = append(done, mark...)
			if err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// appendLine appends a record's line: the bytes encoding/json's Encoder writes
// for it (HTML characters escaped, a newline after), by an encoder that costs
// the writer less per line.
func appendLine(b []byte, r *api.AuditRecord) ([]byte, error) {
	b, err := sjson.Append(b, r, sjson.EscapeHTML|sjson.SortMapKeys)
	return append(b, '\n'), err
}

// sync makes f the file at the path as it stands (another writer may have
// rotated it), cuts a torn last line and learns the last number, unless this
// writer's own last write is still the file's end. Under the lock.
func (s *Stream) sync() error {
	fi, err := os.Stat(s.path)
	if s.f != nil {
		if s.id == nil {
			s.id, _ = s.f.Stat()
		}
		if err != nil || s.id == nil || !os.SameFile(fi, s.id) {
			s.f.Close()
			s.f, s.id, s.known = nil, nil, false
		}
	}
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		s.f, s.known = f, false
	}
	// The path's stat is f's while f is the file at the path: no other writer
	// writes it but under the lock held.
	cur := fi
	if s.id == nil {
		c, err := s.f.Stat()
		if err != nil {
			return err
		}
		s.id, cur = c, c
	}
	if s.known && cur.Size() == s.size {
		return nil
	}
	size, cut, err := cutTorn(s.f, cur.Size())
	if err != nil {
		return err
	}
	s.cut += cut
	s.size = size
	last, err := lastSeq(s.f, size)
	if err != nil {
		return err
	}
	if last == 0 {
		// A new live file: the numbers go on from the newest rotated one.
		if g, err := os.Open(s.path + ".1"); err == nil {
			if st, err := g.Stat(); err == nil {
				last, _ = lastSeq(g, st.Size())
			}
			g.Close()
		}
	}
	s.seq, s.known = last, true
	return nil
}

// cutTorn truncates f after its last newline when it does not end with one: the
// rest is what a writer killed mid-write left. It returns the new size and how
// many bytes were cut.
func cutTorn(f *os.File, size int64) (int64, int64, error) {
	if size == 0 {
		return 0, 0, nil
	}
	var one [1]byte
	if _, err := f.ReadAt(one[:], size-1); err != nil {
		return size, 0, err
	}
	if one[0] == '\n' {
		return size, 0, nil
	}
	end := int64(0)
	err := backwards(f, size, func(off int64, chunk []byte) bool {
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			end = off + int64(i) + 1
			return false
		}
		return true
	})
	if err != nil {
		return size, 0, err
	}
	if err := f.Truncate(end); err != nil {
		return size, 0, err
	}
	return end, size - end, nil
}

// lastSeq is the number of the last line of f (size bytes, ending with a newline)
// that has one; 0 when none does. Lines are small: it reads a window from the end,
// larger until a numbered line is in it.
func lastSeq(f *os.File, size int64) (uint64, error) {
	for window := int64(64 << 10); ; window *= 4 {
		off := max(0, size-window)
		buf := make([]byte, size-off)
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
		first := 0
		if off > 0 {
			first = 1 // it may start mid-line
		}
		for i := len(lines) - 1; i >= first; i-- {
			var r struct {
				Seq uint64 `json:"seq"`
			}
			if json.Unmarshal(lines[i], &r) == nil && r.Seq > 0 {
				return r.Seq, nil
			}
		}
		if off == 0 || window >= 64<<20 {
			return 0, nil
		}
	}
}

// backwards hands f's content to fn in chunks from the end, until fn says stop.
func backwards(f *os.File, size int64, fn func(off int64, chunk []byte) bool) error {
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	for end := size; end > 0; {
		off := max(0, end-chunk)
		n, err := f.ReadAt(buf[:end-off], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if !fn(off, append([]byte(nil), buf[:n]...)) {
			return nil
		}
		end = off
	}
	return nil
}

// rotate moves the live file to <path>.1 (older ones up, the oldest removed),
// starts a new one and writes its first line: how many lines rotation has
// removed so far. Under the lock.
func (s *Stream) rotate() ([]api.AuditRecord, error) {
	s.report(s.f.Sync())
	s.dirty = false
	if s.o.Keep > 0 {
		os.Remove(fmt.Sprintf("%s.%d", s.path, s.o.Keep))
		for i := s.o.Keep - 1; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", s.path, i), fmt.Sprintf("%s.%d", s.path, i+1))
		}
		if err := os.Rename(s.path, s.path+".1"); err != nil {
			return nil, fmt.Errorf("rotate: %w", err)
		}
	} else if err := os.Remove(s.path); err != nil {
		return nil, fmt.Errorf("rotate: %w", err)
	}
	s.f.Close()
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		s.f, s.id, s.known = nil, nil, false
		return nil, err
	}
	s.f, s.id, s.size = f, nil, 0
	dropped := s.seq
	for i := s.o.Keep; i >= 1; i-- {
		if first, ok := firstSeq(fmt.Sprintf("%s.%d", s.path, i)); ok {
			dropped = first - 1
			break
		}
	}
	mark := api.AuditRecord{Seq: s.seq + 1, Time: time.Now().UTC().Format(time.RFC3339Nano), Kind: "audit", Decision: "rotated", DroppedLines: dropped,
		Rule: fmt.Sprintf("the stream was rotated at %d bytes, keeping %d files", s.o.MaxBytes, s.o.Keep)}
	b, _ := json.Marshal(&mark)
	w, err := s.f.Write(append(b, '\n'))
	s.size += int64(w)
	if err != nil {
		return nil, err
	}
	s.seq, s.dirty = mark.Seq, true
	return []api.AuditRecord{mark}, nil
}

// firstSeq is the number of a file's first line.
func firstSeq(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	n, _ := io.ReadFull(f, buf)
	line, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	var r struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(line, &r) != nil || r.Seq == 0 {
		return 0, false
	}
	return r.Seq, true
}

// clip bounds a record's free text, so no line grows with what a plugin wrote.
func clip(r *api.AuditRecord) {
	for _, p := range []*string{&r.Rule, &r.Tool, &r.Host, &r.Session, &r.RequestID, &r.By} {
		*p = clipText(*p)
	}
	if len(r.Dropped) == 0 {
		return
	}
	// A copy: the caller's slice stays as it was.
	d := make([]string, 0, min(len(r.Dropped), 17))
	for i, x := range r.Dropped {
		if i == 16 {
			d = append(d, fmt.Sprintf("… %d more", len(r.Dropped)-16))
			break
		}
		d = append(d, clipText(x))
	}
	r.Dropped = d
}

func clipText(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
