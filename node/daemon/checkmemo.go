package daemon

import (
	"os"
	"path/filepath"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/dirchange"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/userconf"
)

// checkMemo is what a call's policy check last found allowed for one server,
// with the identity of every input that decision was made from. A later call's
// check answers from the memo only when none changed: the decision would be the
// same one. It knows that from the node's watch of the inputs' folders (one
// system call: nothing changed there since the memo was read), or else by
// looking at each input again (one readlink and two stats). A change to any of
// them, a reconcile or a restart decides afresh. Only allowed calls are
// remembered; a refusal is decided (and reconciled) every time.
type checkMemo struct {
	commit      string
	conf        fileID // the plugin's configuration values
	tenant      fileID // the tenant's egress list
	unreachable string // what the node learned of the plugin's user
	running     string // the fingerprint the server was started with
	gen         uint64 // reconciles so far
	// watched: the inputs were read after their folders were watched, at the
	// watch's generation watch, and none is a link whose file's changes the
	// folders' watch would not see.
	watched bool
	watch   uint64
}

// inputWatch watches the folders of the checks' inputs: each plugin's folder
// (its current commit), the configuration values' and the tenant's; their
// parents for their own renaming.
type inputWatch struct {
	*dirchange.Watch
	plugins string
	parents [2]string
	folders [2]string
}

func newInputWatch(d datadir.Dir) (*inputWatch, error) {
	w, err := dirchange.New()
	if err != nil {
		return nil, err
	}
	return &inputWatch{Watch: w, plugins: d.Plugins(), parents: [2]string{d.Root, d.Plugins()}, folders: [2]string{userconf.Folder(d), d.TenantDir()}}, nil
}

// sameInputs reports whether m and o were read from the same inputs, however
// each knew them unchanged.
func (m checkMemo) sameInputs(o checkMemo) bool {
	m.watched, m.watch, o.watched, o.watch = false, 0, false, 0
	return m == o
}

// fileID tells whether a file changed: its size, modification and change times
// and, where the system gives one, its inode (a file replaced by rename). The
// change time is the one that counts: the modification time can be set back
// (cp -p, touch -r), the change time cannot.
type fileID struct {
	exists bool
	size   int64
	mtime  time.Time
	ctime  time.Time
	ino    uint64
	// linked: a symbolic link, or a file with another name elsewhere; a
	// change made through the other name is not an event of this folder.
	linked bool
}

// racyWindow is how long after a file's last change a memo is not taken: a
// second write within the clock's tick of the first leaves the same times.
const racyWindow = 2 * time.Second

func fileIDOf(path string) fileID {
	fi, err := os.Lstat(path)
	linked := err == nil && fi.Mode()&os.ModeSymlink != 0
	if linked {
		fi, err = os.Stat(path)
	}
	if err != nil {
		return fileID{linked: linked}
	}
	ctime, ino, links := statIdentity(fi)
	return fileID{exists: true, size: fi.Size(), mtime: fi.ModTime(), ctime: ctime, ino: ino, linked: linked || links != 1}
}

// racy reports whether the file changed too recently for its times to tell a
// later change apart.
func (f fileID) racy(now time.Time) bool {
	return f.exists && now.Sub(f.ctime) < racyWindow
}

// checkInputs reads the identity of a check's inputs now: from the server's
// last memo when nothing changed in their folders since it was read, from the
// files otherwise.
func (d *Daemon) checkInputs(plugin, server string) (checkMemo, bool) {
	n := d.cfg.Node
	k := key(plugin, server)
	// The folders are watched before the generation is read, and that before
	// the inputs: whatever changes after the read moves the generation on.
	// The parents are watched for their own renaming only: a path that names
	// another folder than the one watched.
	var wgen uint64
	watched := false
	if w := d.inputs.Load(); w != nil {
		folders := [...]string{w.plugins + string(filepath.Separator) + plugin, w.folders[0], w.folders[1]}
		if w.Add(w.parents[:], folders[:]) == nil {
			wgen, watched = w.Gen()
		}
	}
	var m checkMemo
	d.mu.Lock()
	last, ok := d.checked[k]
	d.mu.Unlock()
	if watched && ok && last.watched && last.watch == wgen {
		m = checkMemo{commit: last.commit, conf: last.conf, tenant: last.tenant, watched: true, watch: wgen}
	} else {
		commit, err := installed.Current(n.Dir, plugin)
		if err != nil {
			return checkMemo{}, false
		}
		m = checkMemo{commit: commit, conf: fileIDOf(userconf.File(n.Dir, plugin)), tenant: fileIDOf(n.Dir.TenantList())}
		if now := time.Now(); m.conf.racy(now) || m.tenant.racy(now) {
			return checkMemo{}, false
		}
		m.watched, m.watch = watched && !m.conf.linked && !m.tenant.linked, wgen
	}
	d.mu.Lock()
	m.unreachable = d.unreachable[plugin]
	m.running = d.running[k]
	m.gen = d.reconciles
	d.mu.Unlock()
	return m, true
}
