//go:build unix

package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A plugin home that is a link is refused and nothing at the link's target
// changes: not created, not chowned, not chmodded.
func TestEnsureHomeRefusesALink(t *testing.T) {
	tmp := t.TempDir()
	d := Dir{Root: filepath.Join(tmp, "data")}
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(tmp, "LaunchAgents")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep.plist"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tmp, "not-yet")
	if err := os.Symlink(target, d.Home("evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(missing, d.Home("dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Home("file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := statOf(t, target)
	uid := os.Getuid()
	if uid == 0 {
		uid = 1_900_000_123 // as root, a chown through the link would show
	}
	for _, name := range []string{"evil", "dangling", "file"} {
		_, err := d.EnsureHome(name, ModeUserNode, uid, uid, true)
		if !errors.Is(err, ErrHomeLink) {
			t.Errorf("home %s: got %v, want ErrHomeLink", name, err)
		}
	}
	if after := statOf(t, target); after != before {
		t.Errorf("the link's target changed: %+v → %+v", before, after)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 1 {
		t.Errorf("the link's target gained entries: %v", ents)
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "../evil"} {
		if _, err := d.EnsureHome(name, ModeUserNode, 0, 0, false); err == nil {
			t.Errorf("home name %q accepted", name)
		}
	}
}

// homes/ itself a link is refused the same way.
func TestEnsureHomeRefusesLinkedHomes(t *testing.T) {
	tmp := t.TempDir()
	d := Dir{Root: filepath.Join(tmp, "data")}
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(tmp, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, d.Homes()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureHome("demo", ModeUserNode, 0, 0, false); !errors.Is(err, ErrHomeLink) {
		t.Errorf("linked homes/: got %v, want ErrHomeLink", err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "demo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a home was created through the linked homes/: %v", err)
	}
}

// A fresh home is a 0700 folder under the canonical homes/, owned as asked; a
// data folder below an operator's link is fine.
func TestEnsureHomeCreates(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(tmp, "via")); err != nil {
		t.Fatal(err)
	}
	d := Dir{Root: filepath.Join(tmp, "via", "data")}
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d.Homes(), 0o700)
	uid, chown := os.Getuid(), os.Getuid() == 0
	if chown {
		uid = 1_900_000_123
	}
	home, err := d.EnsureHome("demo", ModeUserNode, uid, uid, chown)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(real, "data", "homes", "demo"); home != want {
		t.Errorf("home %s, want the canonical %s", home, want)
	}
	os.Chmod(home, 0o755)
	if _, err := d.EnsureHome("demo", ModeUserNode, uid, uid, chown); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, home)
	if st.mode != 0o700|uint32(syscall.S_IFDIR) || int(st.uid) != uid {
		t.Errorf("home mode %o owner %d, want a 0700 folder owned by %d", st.mode, st.uid, uid)
	}
}

type stat struct {
	mode     uint32
	uid, gid uint32
	mtime    int64
}

func statOf(t *testing.T, p string) stat {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return stat{uint32(st.Mode), st.Uid, st.Gid, fi.ModTime().UnixNano()}
}
