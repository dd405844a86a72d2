package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"oz0.ai/node/node/netrule"
)

// maxTenantList bounds how much of the tenant list is read.
const maxTenantList = 1 << 20

// ParseTenantList reads the tenant's list: one pattern a line ("host", ".suffix",
// optional ":port"), "#" starting a comment, blank lines ignored. Any bad line fails
// the whole list (the caller then denies everything); the error names the line.
// lines[i] is the line number of patterns[i].
func ParseTenantList(r io.Reader, name string) (patterns []netrule.Pattern, lines []int, err error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxTenantList+1))
	sc.Buffer(make([]byte, 0, 4096), maxTenantList+1)
	n, total := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > maxTenantList {
			return nil, nil, fmt.Errorf("%s: longer than %d bytes", name, maxTenantList)
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		p, err := netrule.ParsePattern(line)
		if err != nil {
			return nil, nil, fmt.Errorf("%s line %d: %w", name, n, err)
		}
		patterns = append(patterns, p)
		lines = append(lines, n)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, nil, fmt.Errorf("%s line %d: longer than %d bytes", name, n+1, maxTenantList)
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s line %d: %w", name, n+1, err)
	}
	return patterns, lines, nil
}

// readTenantList reads the list at path. A missing file is an empty list (nothing
// allowed) rather than an error: a fresh node has none yet.
func readTenantList(path string) *tenantList {
	tl := &tenantList{path: path, read: time.Now()}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		tl.missing = true
		return tl
	}
	if err != nil {
		tl.err = fmt.Errorf("read %s: %w", path, err)
		return tl
	}
	defer f.Close()
	tl.patterns, tl.lines, tl.err = ParseTenantList(f, path)
	return tl
}

func (tl *tenantList) same(o *tenantList) bool {
	if o == nil || tl.missing != o.missing || (tl.err == nil) != (o.err == nil) || len(tl.patterns) != len(o.patterns) {
		return false
	}
	if tl.err != nil && tl.err.Error() != o.err.Error() {
		return false
	}
	for i := range tl.patterns {
		if tl.patterns[i].String() != o.patterns[i].String() || tl.lines[i] != o.lines[i] {
			return false
		}
	}
	return true
}

// reloadTenant re-reads the list and, when it changed, applies it: connections the
// new list no longer allows are closed.
func (p *Proxy) reloadTenant() {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	tl := readTenantList(p.cfg.TenantListPath)
	old := p.tenant.Load()
	if tl.same(old) {
		return
	}
	p.tenant.Store(tl)
	if p.cfg.OnTenantReload != nil {
		p.cfg.OnTenantReload(tl.err == nil)
	}
	if tl.err != nil {
		p.log.Error("tenant egress list unusable; denying all egress", "path", tl.path, "err", tl.err)
	} else {
		p.log.Info("tenant egress list loaded", "path", tl.path, "patterns", len(tl.patterns), "missing", tl.missing)
	}
	p.revoke("tenant list changed")
}

// debounce lets an editor's write-temp-then-rename settle before reading.
const debounce = 15 * time.Millisecond

// watchTenant follows the list's folder (not the file: editors replace the file by
// renaming, which a watch on the file itself would lose). A slow stat poll backs it
// up for folders created later and for lost events.
func (p *Proxy) watchTenant() {
	defer p.wg.Done()
	dir, base := filepath.Split(p.cfg.TenantListPath)
	w, err := fsnotify.NewWatcher()
	var events <-chan fsnotify.Event
	var errs <-chan error
	watching := false
	if err != nil {
		p.log.Warn("tenant egress list: cannot watch; polling instead", "err", err)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	addWatch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(filepath.Clean(dir)); err == nil {
			watching = true
			p.reloadTenant() // anything written before the watch existed
		}
	}
	addWatch()
	if !watching {
		p.log.Warn("tenant egress list: folder cannot be watched yet; polling", "dir", dir)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	var lastStat string
	for {
		select {
		case <-p.done:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == base {
				timer.Reset(debounce)
			}
			if filepath.Clean(ev.Name) == filepath.Clean(dir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The folder itself went away: the poll re-adds the watch when it is back.
				watching = false
				timer.Reset(debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			p.log.Warn("tenant egress list watch", "err", err)
			timer.Reset(debounce)
		case <-timer.C:
			p.reloadTenant()
		case <-poll.C:
			addWatch()
			st := statKey(p.cfg.TenantListPath)
			if st != lastStat {
				lastStat = st
				p.reloadTenant()
			}
		}
	}
}

func statKey(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "err:" + err.Error()
	}
	return fmt.Sprintf("%d/%d/%v", fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
}
