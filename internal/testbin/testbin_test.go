package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, name, body string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The key follows what goes into the binary: a source file, an embedded file or
// the Go settings change it; a test file or version-control data do not.
func TestSourceKeyFollowsTheBuildInputs(t *testing.T) {
	root := t.TempDir()
	write(t, root, "go.mod", "module x\n")
	write(t, root, "cmd/x/main.go", "package main\nfunc main() {}\n")
	write(t, root, "fixtures/demo/plugin.json", "{}")
	write(t, root, "cmd/x/main_test.go", "package main\n")
	write(t, root, ".git/HEAD", "ref: a\n")
	settings := []byte("go1.26\nlinux\n")
	key := func(s []byte) string {
		t.Helper()
		k, err := sourceKey(root, s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key(settings)
	if again := key(settings); again != base {
		t.Fatalf("two keys of unchanged sources differ: %s %s", base, again)
	}
	write(t, root, "cmd/x/main_test.go", "package main\n// changed\n")
	write(t, root, ".git/HEAD", "ref: b\n")
	if k := key(settings); k != base {
		t.Errorf("a test file or .git changed the key")
	}
	if k := key([]byte("go1.27\nlinux\n")); k == base {
		t.Errorf("other Go settings kept the key")
	}
	for _, f := range []string{"cmd/x/main.go", "fixtures/demo/plugin.json", "go.mod"} {
		old, _ := os.ReadFile(filepath.Join(root, f))
		write(t, root, f, string(old)+" ")
		if k := key(settings); k == base {
			t.Errorf("a change to %s kept the key", f)
		}
		write(t, root, f, string(old))
	}
	write(t, root, "node/new.go", "package node\n")
	if k := key(settings); k == base {
		t.Errorf("a new source file kept the key")
	}
}

// The tests run what the folder holds, often as root: a folder that is a link,
// or that others can write, is refused.
func TestBuildFolderMustBeOwnAndPrivate(t *testing.T) {
	tmp := t.TempDir()
	good := filepath.Join(tmp, prefix+"good")
	if err := os.Mkdir(good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ownedFolder(good); err != nil {
		t.Errorf("own 0755 folder refused: %v", err)
	}
	link := filepath.Join(tmp, prefix+"link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if err := ownedFolder(link); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a link to a folder: %v, want a refusal", err)
	}
	open := filepath.Join(tmp, prefix+"open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := ownedFolder(open); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a world-writable folder: %v, want a refusal", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(tmp, prefix+"theirs")
		if err := os.Mkdir(theirs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := ownedFolder(theirs); err == nil || !strings.Contains(err.Error(), "another user") {
			t.Errorf("another user's folder: %v, want a refusal", err)
		}
	}
}

// Node builds once and gives every caller the same binary, which runs.
func TestNodeBuildsOnceAndRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the oz0-node build is not tested")
	}
	a := Node(t)
	if b := Node(t); b != a {
		t.Fatalf("two calls gave %s and %s", a, b)
	}
	if !strings.HasPrefix(filepath.Base(filepath.Dir(a)), prefix) {
		t.Errorf("binary %s is not in a build folder", a)
	}
	fi, err := os.Stat(filepath.Dir(a))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("build folder mode %v (%v), want 0755 so plugin users can read the binary", fi.Mode().Perm(), err)
	}
	out, err := exec.Command(a, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", a, err, out)
	}
}
