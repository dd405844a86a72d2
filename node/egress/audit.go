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
type auditLog struct {
	ch   chan api.EgressDecision
	done chan struct{}
	once sync.Once
	log  *slog.Logger
}

const (
	auditQueue = 4096
	auditBatch = 256 << 10
	syncEvery  = time.Second
)

func openAudit(path string, log *slog.Logger) (*auditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("egress audit %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress audit %s: %w", path, err)
	}
	a := &auditLog{ch: make(chan api.EgressDecision, auditQueue), done: make(chan struct{}), log: log}
	go a.run(f)
	return a, nil
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

func (a *auditLog) run(f *os.File) {
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
		if buf.Len() > 0 {
			_, err := f.Write(buf.Bytes())
			report(err)
			buf.Reset()
			dirty = true
		}
	}
	finish := func() {
		flush()
		report(f.Sync())
		report(f.Close())
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
			// Take what else is queued, then write it in one go.
			for more := true; more && buf.Len() < auditBatch; {
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
			if dirty {
				report(f.Sync())
				dirty = false
			}
		}
	}
}
