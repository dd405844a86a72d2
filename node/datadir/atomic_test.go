package datadir

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// leftovers lists files in dir other than want.
func leftovers(t *testing.T, dir string, want ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		keep := false
		for _, w := range want {
			keep = keep || e.Name() == w
		}
		if !keep {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestWriteFileAtomicWritesWithTheExactMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "status.json")
	for i, content := range []string{"first", "second, longer", "3"} {
		m := []os.FileMode{0o644, 0o600, 0o640}[i]
		if err := WriteFileAtomic(p, []byte(content), m); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("content %q, want %q", b, content)
		}
		if got := mode(t, p).Perm(); got != m {
			t.Errorf("mode %v, want %v (whatever the umask)", got, m)
		}
	}
	if l := leftovers(t, dir, "status.json"); len(l) != 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestWriteFileAtomicLeavesOldContentWhenTheFolderIsUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root writes to any folder: run this test again as nobody.
		asNobody(t)
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o600)
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if err := WriteFileAtomic(p, []byte("new"), 0o600); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("err %v, want one naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("content %q after a failed write", b)
	}
	if l := leftovers(t, dir, "f"); len(l) != 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestWriteFileAtomicLeavesOldContentWhenTheWriteFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	old := bytes.Repeat([]byte("o"), 100)
	if err := os.WriteFile(p, old, 0o600); err != nil {
		t.Fatal(err)
	}
	// Limit file size so the write of the new content fails half-way (root too).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("getrlimit: %v (failed-write case not tested)", err)
	}
	small := lim
	small.Cur = 4096
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Skipf("setrlimit: %v (failed-write case not tested)", err)
	}
	err := WriteFileAtomic(p, bytes.Repeat([]byte("n"), 10000), 0o600)
	syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("err %v, want a write error naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, old) {
		t.Errorf("content changed after a failed write (%d bytes)", len(b))
	}
	if l := leftovers(t, dir, "f"); len(l) != 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestWriteFileAtomicLeavesNoTempWhenTheRenameFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "target")
	// A non-empty folder where the file should go: the rename fails after the
	// temp file was fully written.
	if err := os.MkdirAll(filepath.Join(p, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(p, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), "rename") {
		t.Errorf("err %v, want a rename error", err)
	}
	if l := leftovers(t, dir, "target"); len(l) != 0 {
		t.Errorf("left behind: %v", l)
	}
	if _, err := os.Stat(filepath.Join(p, "inside")); err != nil {
		t.Errorf("the folder in the way was touched: %v", err)
	}
}

func TestWriteFileAtomicInAMissingFolderFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "no", "such", "f")
	if err := WriteFileAtomic(p, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("err %v", err)
	}
}

func TestAppendLineAppends(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "ledger.jsonl")
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"a":1}`...)
	if err := AppendLine(p, buf); err != nil {
		t.Fatal(err)
	}
	if spare := buf[:len(buf)+1]; spare[len(buf)] != 0 {
		t.Errorf("AppendLine wrote %q into the caller's array", spare[len(buf)])
	}
	if err := AppendLine(p, []byte("{\"b\":2}\n")); err != nil {
		t.Fatal(err)
	}
	if err := AppendLine(p, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"a\":1}\n{\"b\":2}\n\n" {
		t.Errorf("content %q", b)
	}
	if m := mode(t, p).Perm(); m != 0o600 {
		t.Errorf("mode %v, want 0600 (private) whatever the umask", m)
	}
	if err := AppendLine(filepath.Join(p, "x"), []byte("y")); err == nil {
		t.Error("append under a file succeeded")
	}
}

// asNobody runs the current test again in a child process as uid/gid 65534 and
// fails if it fails there.
func asNobody(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The go build folder is private to root: copy the binary where nobody can run it.
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "datadir-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "datadir.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(exe, 0o755)
	cmd := exec.Command(exe, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && strings.Contains(string(out), "--- FAIL") {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		t.Skipf("cannot run the test binary as nobody (%v: %s): the unwritable-folder case was NOT tested", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as nobody, the test did not pass:\n%s", out)
	}
}
