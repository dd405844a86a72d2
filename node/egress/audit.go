package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"oz0.ai/node/node/api"
)

// auditLog appends decisions as JSON lines from one goroutine. Callers hand records
// over a buffered channel and only block when it is full (a disk slower than the
// proxy slows the proxy rather than losing lines). Lines are written to the file as
// soon as the queue drains; the file is fsynced at most once per syncEvery and on
// close — a crash can lose up to that much of the tail.
//
// The log is rotated by size: once the file reaches maxBytes it is renamed to
// <path>.1 (older ones shift up to <path>.<keep>, the oldest is removed) and a new
// file is started, so a busy node's log stays bounded. Rotation is written here
// rather than taken from a log-rotation library because it has to keep this
// writer's batching, fsync and shared-file rules.
type auditLog struct {
	path     string
	maxBytes int64
	keep     int
	ch       chan api.EgressDecision
	done     chan struct{}
	once     sync.Once
	log      *slog.Logger
}

const (
	auditQueue = 4096
	auditBatch = 256 << 10
	syncEvery  = time.Second

	// DefaultAuditMaxBytes and DefaultAuditKeep bound the audit log at
	// (1 + keep) × max bytes on disk.
	DefaultAuditMaxBytes = 64 << 20
	DefaultAuditKeep     = 5
)

func openAudit(path string, maxBytes int64, keep int, log *slog.Logger) (*auditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("egress audit %s: %w", path, err)
	}
	a := &auditLog{path: path, maxBytes: maxBytes, keep: keep, ch: make(chan api.EgressDecision, auditQueue), done: make(chan struct{}), log: log}
	f, size, err := a.open()
	if err != nil {
		return nil, err
	}
	go a.run(f, size)
	return a, nil
}

// open opens (or creates) the live file for appending and returns its size.
func (a *auditLog) open() (*os.File, int64, error) {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("egress audit %s: %w", a.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("egress audit %s: %w", a.path, err)
	}
	return f, st.Size(), nil
}

// rotate closes f and starts a new live file. When another process (oz0-node
// exec appends to the same log) has rotated already, f is no longer the file at
// the path: the new one is opened without renaming anything again.
func (a *auditLog) rotate(f *os.File) (*os.File, int64, error) {
	mine, _ := f.Stat()
	err := f.Sync()
	// The lock on the file being rotated keeps two writers that fill it at the
	// same moment from both shifting the names.
	unlock := lockFile(f)
	defer func() { unlock(); f.Close() }()
	if cur, serr := os.Stat(a.path); serr == nil && mine != nil && os.SameFile(cur, mine) {
		os.Remove(fmt.Sprintf("%s.%d", a.path, a.keep))
		for i := a.keep - 1; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", a.path, i), fmt.Sprintf("%s.%d", a.path, i+1))
		}
		if a.keep >= 1 {
			if rerr := os.Rename(a.path, a.path+".1"); rerr != nil && err == nil {
				err = fmt.Errorf("egress audit: rotate %s: %w", a.path, rerr)
			}
		} else if rerr := os.Remove(a.path); rerr != nil && err == nil {
			err = fmt.Errorf("egress audit: rotate %s: %w", a.path, rerr)
		}
	}
	nf, size, oerr := a.open()
	if oerr != nil {
		return nil, 0, oerr
	}
	return nf, size, err
}

func (a *auditLog) add(d api.EgressDecision) {
	if a != nil {
		a.ch <- d
	}
}

func (a *auditLog) close() {
	if a == nil {
		return
	}
	a.once.Do(func() { close(a.ch) })
	<-a.done
}

func (a *auditLog) run(f *os.File, size int64) {
	defer close(a.done)
	// Batches are whole lines written with one write(2) on an O_APPEND file, so
	// another process appending to the same log (oz0-node exec serving its own
	// endpoint) never splits a line.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	tick := time.NewTicker(syncEvery)
	defer tick.Stop()
	dirty, failed := false, false
	report := func(err error) {
		if err != nil && !failed {
			failed = true // once, not per line
			a.log.Error("egress audit: write failed", "path", f.Name(), "err", err)
		}
	}
	flush := func() {
		if buf.Len() == 0 {
			return
		}
		if f == nil { // a rotation could not open the new file: try again
			var err error
			f, size, err = a.open()
			if report(err); err != nil {
				buf.Reset()
				return
			}
		}
		n, err := f.Write(buf.Bytes())
		report(err)
		buf.Reset()
		dirty = true
		if size += int64(n); size >= a.maxBytes {
			nf, nsize, err := a.rotate(f)
			report(err)
			f, size, dirty = nf, nsize, false
		}
	}
	finish := func() {
		flush()
		if f != nil {
			if dirty { // what is already synced needs no second fsync at every exec's exit
				report(f.Sync())
			}
			report(f.Close())
		}
	}
	ch := a.ch
	for {
		select {
		case d, ok := <-ch:
			if !ok {
				finish()
				return
			}
			report(enc.Encode(d))
			// Take what else is queued, then write it in one go; a batch ends
			// where the file reaches its size, so a file overshoots by one
			// record at most.
			limit := min(int64(auditBatch), max(a.maxBytes-size, 1))
			for more := true; more && int64(buf.Len()) < limit; {
				select {
				case d, ok := <-ch:
					if !ok {
						finish()
						return
					}
					report(enc.Encode(d))
				default:
					more = false
				}
			}
			flush()
		case <-tick.C:
			if dirty && f != nil {
				report(f.Sync())
				dirty = false
			}
		}
	}
}
