package daemon

import (
	"os"
	"time"

	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/userconf"
)

// checkMemo is what a call's policy check last found allowed for one server,
// with the identity of every input that decision was made from. A later call's
// check looks at each input again (one readlink and two stats) and answers from
// the memo only when none changed: the decision would be the same one. A change
// to any of them, a reconcile or a restart decides afresh. Only allowed calls
// are remembered; a refusal is decided (and reconciled) every time.
type checkMemo struct {
	commit      string
	conf        fileID // the plugin's configuration values
	tenant      fileID // the tenant's egress list
	unreachable string // what the node learned of the plugin's user
	running     string // the fingerprint the server was started with
	gen         uint64 // reconciles so far
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
}

// racyWindow is how long after a file's last change a memo is not taken: a
// second write within the clock's tick of the first leaves the same times.
const racyWindow = 2 * time.Second

func fileIDOf(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	ctime, ino := statIdentity(fi)
	return fileID{exists: true, size: fi.Size(), mtime: fi.ModTime(), ctime: ctime, ino: ino}
}

// racy reports whether the file changed too recently for its times to tell a
// later change apart.
func (f fileID) racy(now time.Time) bool {
	return f.exists && now.Sub(f.ctime) < racyWindow
}

// checkInputs reads the identity of a check's inputs now.
func (d *Daemon) checkInputs(plugin, server string) (checkMemo, bool) {
	n := d.cfg.Node
	commit, err := installed.Current(n.Dir, plugin)
	if err != nil {
		return checkMemo{}, false
	}
	m := checkMemo{commit: commit, conf: fileIDOf(userconf.File(n.Dir, plugin)), tenant: fileIDOf(n.Dir.TenantList())}
	if now := time.Now(); m.conf.racy(now) || m.tenant.racy(now) {
		return checkMemo{}, false
	}
	d.mu.Lock()
	m.unreachable = d.unreachable[plugin]
	m.running = d.running[key(plugin, server)]
	m.gen = d.reconciles
	d.mu.Unlock()
	return m, true
}
