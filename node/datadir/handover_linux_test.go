package datadir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A plugin's folders change hands whole, and nothing the plugin put in them
// reaches out: a link is never followed (its target keeps its owner), a file
// with another name elsewhere is not given to a plugin's user, and a
// set-user-ID file handed over keeps no set-user-ID bit.
func TestHandOverChangesOnlyWhatIsInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: handing folders between users needs root")
	}
	const plugin = 2100000123
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	must(t, os.MkdirAll(filepath.Join(outside, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "file"), []byte("the node's"), 0o644))
	home := filepath.Join(root, "home")
	deep := filepath.Join(home, "a", "b", "c")
	must(t, os.MkdirAll(deep, 0o700))
	must(t, os.WriteFile(filepath.Join(deep, "state"), []byte("x"), 0o600))
	must(t, os.Symlink(filepath.Join(outside, "file"), filepath.Join(home, "to-file")))
	must(t, os.Symlink(filepath.Join(outside, "dir"), filepath.Join(home, "a", "to-dir")))
	must(t, os.Link(filepath.Join(outside, "file"), filepath.Join(home, "second-name")))
	must(t, os.WriteFile(filepath.Join(home, "suid"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chmod(filepath.Join(home, "suid"), 0o4755))

	changed, err := HandOver(home, plugin, plugin)
	if err != nil || !changed {
		t.Fatalf("hand over to the plugin: %v %v", changed, err)
	}
	for _, p := range []string{home, filepath.Join(home, "a"), deep, filepath.Join(deep, "state"), filepath.Join(home, "to-file"), filepath.Join(home, "a", "to-dir"), filepath.Join(home, "suid")} {
		if uid := lowner(t, p); uid != plugin {
			t.Errorf("%s owned by %d; want %d", p, uid, plugin)
		}
	}
	for _, p := range []string{outside, filepath.Join(outside, "dir"), filepath.Join(outside, "file")} {
		if uid := lowner(t, p); uid != 0 {
			t.Errorf("%s, outside, was handed to uid %d through a link or a second name", p, uid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(home, "suid")); fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("a set-user-ID file changed hands keeping its bit: %v", fi.Mode())
	}
	if changed, err := HandOver(home, plugin, plugin); err != nil || changed {
		t.Fatalf("a second hand-over changed something: %v %v", changed, err)
	}

	// Back to the node (root): what the plugin made is set-user-ID no more.
	must(t, os.Chmod(filepath.Join(home, "suid"), 0o4755))
	if changed, err := HandOver(home, 0, 0); err != nil || !changed {
		t.Fatalf("hand over to the node: %v %v", changed, err)
	}
	if fi, _ := os.Stat(filepath.Join(home, "suid")); lowner(t, filepath.Join(home, "suid")) != 0 || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("the plugin's set-user-ID file became root's keeping its bit: %v", fi.Mode())
	}
	if uid := lowner(t, filepath.Join(deep, "state")); uid != 0 {
		t.Errorf("state owned by %d after handing back", uid)
	}

	// The top itself a link: refused, its target untouched.
	link := filepath.Join(root, "home-link")
	must(t, os.Symlink(outside, link))
	if _, err := HandOver(link, plugin, plugin); err == nil || lowner(t, outside) != 0 {
		t.Fatalf("a home that is a link was handed over (err %v)", err)
	}
}

func lowner(t *testing.T, p string) int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
