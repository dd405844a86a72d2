//go:build unix

package pluginuser

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// Available reports whether per-plugin users work with this data folder (a root
// node on Linux whose data folder every user can traverse). When the data folder is
// the reason they do not, it returns the node's no-plugin-users finding saying why
// and what to do; the caller logs it.
func Available(d datadir.Dir) (bool, *api.Finding) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return false, nil
	}
	ok, blocker := datadir.TraversableByOthers(d.Root)
	if ok {
		return true, nil
	}
	mode := "missing"
	if fi, err := os.Stat(blocker); err == nil {
		mode = fmt.Sprintf("mode %04o", fi.Mode().Perm())
	}
	f := &api.Finding{
		Code: api.CodeNoPluginUsers, Severity: api.SevWarning, Subject: "node",
		Message: fmt.Sprintf("per-plugin users are off: the data folder %s lies under %s (%s), which other users cannot traverse, so plugin users could not reach their own files; sandboxed plugins run as the node's user", d.Root, blocker, mode),
		Fix:     fmt.Sprintf("move the data folder to one every user can traverse, e.g. --data-dir /var/lib/oz0-node, or give %s the search bit (chmod o+x %s)", blocker, blocker),
	}
	return false, f
}

// Prepare sets, before a plugin starts as uid/gid, the modes that user needs —
// below the data folder only; nothing above it is changed:
//   - the data folder and plugins/, homes/, run/, run/egress/, tenant/ at 0711:
//     traversable, never listable;
//   - plugins/<name> owned root:gid 0750 and its installed files group-readable
//     (0640, or 0750 when executable), so the plugin's user reads its files and no
//     other plugin user does (they are not in the group); install records stay 0600;
//   - homes/<name> owned by uid:gid, 0700; run/egress/<name> root:gid 0750;
//   - tenant/egress readable (0644); the key, tenant settings, the ledger, logs/ and
//     staging/ private.
//
// readable are paths outside the data folder the user must read (the node binary);
// they and the managed runtimes are checked, never changed: one out of reach is an
// *UnreachableError. Symlinks are never followed, and a file with more than one
// name is refused (changing its owner would change another name's too).
func Prepare(d datadir.Dir, name string, uid, gid uint32, readable ...string) error {
	if !manifest.ValidName(name) {
		return fmt.Errorf("plugin %q: not a plugin name", name)
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return fmt.Errorf("plugin %s: %w: per-plugin users exist only on Linux nodes running as root", name, ErrOff)
	}
	if ok, blocker := datadir.TraversableByOthers(d.Root); !ok {
		return fmt.Errorf("plugin %s: %w: the data folder %s lies under %s, which other users cannot traverse", name, ErrOff, d.Root, blocker)
	}
	if uid == 0 || gid == 0 {
		return fmt.Errorf("plugin %s: refusing uid/gid 0 for a plugin user", name)
	}

	for _, p := range []string{d.Root, d.Plugins(), d.Homes(), d.Run(), filepath.Join(d.Run(), "egress"), d.TenantDir()} {
		if err := ensureDir(p, 0, 0, 0o711); err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	// Private things, restated before every start: a mode widened by hand is narrowed.
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{d.Key(), 0o600}, {d.Token(), 0o600}, {d.MetricsToken(), 0o600}, {d.Ledger(), 0o600}, {d.Logs(), 0o700}, {d.Staging(), 0o700}} {
		if err := chmodNoFollow(p.path, p.mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	if ents, err := os.ReadDir(d.TenantDir()); err == nil {
		for _, e := range ents {
			p := filepath.Join(d.TenantDir(), e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				// The operator linked it elsewhere: never changed through the link.
				if p == d.TenantList() {
					if err := othersCanRead(p); err != nil {
						return fmt.Errorf("plugin %s: tenant list: %w", name, err)
					}
				}
				continue
			}
			mode := os.FileMode(0o600)
			if e.IsDir() {
				mode = 0o700
			}
			if p == d.TenantList() {
				mode = 0o644 // the one tenant file plugin users read (through the proxy's rules)
			}
			if err := chmodNoFollow(p, mode); err != nil {
				return fmt.Errorf("plugin %s: %w", name, err)
			}
		}
	}

	if err := ensureDir(d.Plugin(name), 0, gid, 0o750); err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	err := filepath.WalkDir(d.Plugin(name), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == d.Plugin(name) {
			return nil
		}
		rel, _ := filepath.Rel(d.Plugin(name), p)
		top := !strings.Contains(rel, string(filepath.Separator))
		if top && strings.HasSuffix(rel, ".json") {
			return setOwnerMode(p, 0, 0, 0o600) // install records: the node's alone
		}
		if top && strings.HasPrefix(rel, ".") {
			return nil // .lock-style files of the node, if any
		}
		return setOwnerMode(p, 0, gid, 0)
	})
	if err != nil {
		return fmt.Errorf("plugin %s: set modes of its files: %w", name, err)
	}

	if err := ensureDir(d.Home(name), uid, gid, 0o700); err != nil {
		return fmt.Errorf("plugin %s: home: %w", name, err)
	}
	if err := ensureDir(d.HookHome(name), uid, gid, 0o700); err != nil {
		return fmt.Errorf("plugin %s: hooks' home: %w", name, err)
	}
	if err := ensureDir(d.EgressSocketDir(name), 0, gid, 0o750); err != nil {
		return fmt.Errorf("plugin %s: egress socket folder: %w", name, err)
	}

	rts, err := installed.Runtimes(d)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	for _, p := range append(rts, readable...) {
		if p == "" {
			continue
		}
		if err := othersCanRead(p); err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	return nil
}

// ensureDir makes p a real folder (not a symlink) owned by uid:gid with mode.
func ensureDir(p string, uid, gid uint32, mode os.FileMode) error {
	if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", p, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a folder", p)
	}
	return setOwnerMode(p, uid, gid, mode)
}

// setOwnerMode sets owner and mode of p without following a symlink. mode 0 means
// "group-readable by the plugin": folders 0750, executables 0750, other files 0640.
func setOwnerMode(p string, uid, gid uint32, mode os.FileMode) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&fs.ModeSymlink != 0 {
		if st != nil && (st.Uid != uid || st.Gid != gid) {
			return os.Lchown(p, int(uid), int(gid))
		}
		return nil
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a file, folder or symlink (%s) inside a plugin folder", p, fi.Mode().Type())
	}
	if fi.Mode().IsRegular() && st != nil && st.Nlink > 1 {
		return fmt.Errorf("%s: a hard link (%d names); refusing to change its owner", p, st.Nlink)
	}
	if mode == 0 {
		switch {
		case fi.IsDir(), fi.Mode()&0o100 != 0:
			mode = 0o750
		default:
			mode = 0o640
		}
	}
	if st != nil && (st.Uid != uid || st.Gid != gid) {
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
	}
	if fi.Mode().Perm() != mode || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return os.Chmod(p, mode) // p is not a symlink (checked above, under a root-only parent)
	}
	return nil
}

func chmodNoFollow(p string, mode os.FileMode) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			// A link that leads nowhere holds nothing to keep private; the
			// node makes the file anew where it needs it (never through it).
			slog.Warn("a dangling symlink where the node keeps a private file; left alone", "path", p)
			return fmt.Errorf("%s: a dangling symlink: %w", p, fs.ErrNotExist)
		}
		return fmt.Errorf("%s: a symlink where the node keeps a private file", p)
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	return os.Chmod(p, mode)
}

// othersCanRead checks, without changing anything, that every user can reach and
// read p (a file, or a folder it can list).
func othersCanRead(p string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return &UnreachableError{Path: p, Why: err.Error()}
	}
	if ok, blocker := datadir.TraversableByOthers(real); !ok {
		return &UnreachableError{Path: p, Why: blocker + " cannot be traversed by other users"}
	}
	fi, err := os.Stat(real)
	if err != nil {
		return &UnreachableError{Path: p, Why: err.Error()}
	}
	need := os.FileMode(0o004)
	if fi.IsDir() {
		need = 0o005
	}
	if fi.Mode().Perm()&need != need {
		return &UnreachableError{Path: p, Why: fmt.Sprintf("mode %04o does not let other users read it", fi.Mode().Perm())}
	}
	return nil
}
