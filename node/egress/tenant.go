package egress

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"oz0.ai/node/node/datadir"
)

// readTenantList reads the list at path. A missing file is an empty list (nothing
// allowed) rather than an error: a fresh node has none yet.
func readTenantList(path string) *tenantList {
	tl, _ := readTenantRaw(path)
	return tl
}

// readTenantRaw reads and parses the list, returning its bytes too: the watcher
// compares them across reads to tell a settled list from one being rewritten.
func readTenantRaw(path string) (*tenantList, []byte) {
	read := time.Now()
	t, raw := datadir.ReadTenantList(path)
	return &tenantList{path: path, read: read, patterns: t.Patterns, lines: t.Lines, missing: t.Missing, err: t.Err}, raw
}

// narrowed is what may apply of tl while it may still be half-written: only the
// patterns old has too, so nothing is allowed that old did not allow. A list
// that does not parse (or a missing one) narrows to nothing; an old list that did
// not parse stays in force (it denies everything) until tl settles.
func (tl *tenantList) narrowed(old *tenantList) *tenantList {
	if old == nil || old.err != nil {
		return old // it denies everything already, and says why
	}
	n := &tenantList{path: tl.path, read: tl.read, missing: tl.missing}
	if tl.err != nil || tl.missing {
		return n
	}
	had := make(map[string]bool, len(old.patterns))
	for _, p := range old.patterns {
		had[p.String()] = true
	}
	for i, p := range tl.patterns {
		if had[p.String()] {
			n.patterns = append(n.patterns, p)
			n.lines = append(n.lines, tl.lines[i])
		}
	}
	return n
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

// applyTenant makes tl the list in force when it differs from the current one;
// connections the new list no longer allows are closed.
func (p *Proxy) applyTenant(tl *tenantList) {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	if tl.same(p.tenant.Load()) {
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

// Settling. A change is read debounce after the first write that announced it,
// however many writes follow (a timer restarted by every write would let a list
// rewritten every few milliseconds wait for the poll). What was read applies in
// full only once the same content has been read again settle (or, for content
// whose last line is unterminated, settleUnterminated) later; until then only its
// narrowing applies (tenantList.narrowed), so an in-progress rewrite can take
// hosts away at once but never add one.
const (
	debounce           = 15 * time.Millisecond
	settle             = 15 * time.Millisecond
	settleUnterminated = time.Second
)

// tenantSettler tracks the content last read and since when it has been seen.
type tenantSettler struct {
	key   string
	since time.Time
}

// step reads the list and applies it, in full or narrowed; it returns how long
// to wait before reading again to settle it (0: settled).
func (p *Proxy) settleStep(st *tenantSettler) time.Duration {
	tl, raw := readTenantRaw(p.cfg.TenantListPath)
	key := fmt.Sprintf("%v|%v|%s", tl.missing, tl.err, raw)
	now := time.Now()
	if key != st.key {
		st.key, st.since = key, now
	}
	need := settle
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		need = settleUnterminated
	}
	if waited := now.Sub(st.since); waited < need {
		p.applyTenant(tl.narrowed(p.tenant.Load()))
		return need - waited
	}
	p.applyTenant(tl)
	return 0
}

// watchTenant follows the list's folder (not the file: editors replace the file by
// renaming, which a watch on the file itself would lose). A slow stat poll backs it
// up for folders created later and for lost events.
func (p *Proxy) watchTenant() {
	defer p.wg.Done()
	dir, base := filepath.Split(p.cfg.TenantListPath)
	var w *fsnotify.Watcher
	var err error
	if !p.cfg.PollOnly {
		w, err = fsnotify.NewWatcher()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	watching := false
	// The timer is armed by the first event and never pushed back by later ones,
	// only brought forward.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	var due time.Time
	arm := func(d time.Duration) {
		at := time.Now().Add(d)
		if !armed || at.Before(due) {
			armed, due = true, at
			timer.Reset(d)
		}
	}
	var st tenantSettler
	if err != nil {
		p.log.Warn("tenant egress list: cannot watch; polling instead", "err", err)
	} else if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	addWatch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(filepath.Clean(dir)); err == nil {
			watching = true
			arm(0) // anything written before the watch existed
		}
	}
	// A list that is a link (an operator's file kept elsewhere) is followed in its
	// target's folder too, so an edit there applies as one here does, not at the
	// poll. The target is looked up again after every change and poll.
	var target string
	follow := func() {
		if w == nil {
			return
		}
		r, err := filepath.EvalSymlinks(p.cfg.TenantListPath)
		if err != nil || r == filepath.Clean(p.cfg.TenantListPath) {
			r = ""
		}
		if r == target {
			return
		}
		if target != "" && filepath.Dir(target) != filepath.Clean(dir) {
			w.Remove(filepath.Dir(target))
		}
		target = ""
		if r != "" && (filepath.Dir(r) == filepath.Clean(dir) || w.Add(filepath.Dir(r)) == nil) {
			target = r
		}
	}
	addWatch()
	follow()
	if !watching && !p.cfg.PollOnly {
		p.log.Warn("tenant egress list: folder cannot be watched yet; polling", "dir", dir)
	}
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
			if filepath.Base(ev.Name) == base || target != "" && filepath.Clean(ev.Name) == target {
				arm(debounce)
				follow()
			}
			if filepath.Clean(ev.Name) == filepath.Clean(dir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The folder itself went away: the poll re-adds the watch when it is back.
				watching = false
				arm(debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			p.log.Warn("tenant egress list watch", "err", err)
			arm(debounce)
		case <-timer.C:
			armed = false
			if again := p.settleStep(&st); again > 0 {
				arm(again)
			}
		case <-poll.C:
			addWatch()
			follow()
			sk := statKey(p.cfg.TenantListPath)
			if sk != lastStat {
				lastStat = sk
				arm(0)
			}
		}
	}
}

func statKey(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "err:" + err.Error()
	}
	// The inode too: a list renamed over the old one may match its size and time
	// (a file prepared earlier, or copied with its time kept).
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = uint64(st.Ino)
	}
	return fmt.Sprintf("%d/%d/%v/%d", fi.Size(), fi.ModTime().UnixNano(), fi.Mode(), ino)
}
