// Package testbin builds the oz0-node binary that end-to-end tests run, in one
// place for every package's tests: once per test process, and once per state of
// the sources for all of them. The binary lives in a folder of the temporary
// directory named by a hash of the module's sources and the Go settings, so test
// processes running side by side (go test ./... runs packages in parallel) and
// later runs on unchanged sources share one build, and a changed source gets a
// new one. The folder is 0755 (plugin users read the binary: it is the egress
// bridge inside their sandboxes) and must belong to the user running the tests.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Package is the import path of the binary built.
const Package = "oz0.ai/node/cmd/oz0-node"

// prefix names the build folders in the temporary directory.
const prefix = "oz0-node-testbin-"

// staleAfter is how long a build folder nobody used is kept.
const staleAfter = 24 * time.Hour

var built struct {
	once sync.Once
	path string
	err  error
}

// Node returns the path of an oz0-node binary built from the module's sources as
// they are now, building it at the first call of a test process whose sources
// have no build yet. A failed build fails the test.
func Node(t testing.TB) string {
	t.Helper()
	built.once.Do(func() { built.path, built.err = build() })
	if built.err != nil {
		t.Fatalf("build %s for end-to-end tests: %v", Package, built.err)
	}
	return built.path
}

func build() (string, error) {
	settings, err := exec.Command("go", "env", "GOMOD", "GOVERSION", "GOFLAGS", "GOOS", "GOARCH", "CGO_ENABLED", "GOEXPERIMENT").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	gomod, _, _ := strings.Cut(string(settings), "\n")
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the module (go env GOMOD is empty)")
	}
	root := filepath.Dir(gomod)
	key, err := sourceKey(root, settings)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), prefix+key)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := ownedFolder(dir); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	// One builder at a time; the others wait and then find the binary there.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	bin := filepath.Join(dir, "oz0-node")
	now := time.Now()
	os.Chtimes(dir, now, now) // in use: not pruned by another run
	if fi, err := os.Lstat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	tmp := bin + ".partial"
	cmd := exec.Command("go", "build", "-o", tmp, Package)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	prune(dir)
	return bin, nil
}

// sourceKey hashes what goes into the build: every file of the module but test
// files and version-control data (embedded files may live anywhere), and the Go
// settings.
func sourceKey(root string, settings []byte) (string, error) {
	h := sha256.New()
	h.Write(settings)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == ".git" || strings.HasPrefix(name, prefix)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") || name == ".git" {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s\x00%s\x00", rel, d.Type())
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			h.Write([]byte(target))
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(h, f)
		fmt.Fprintf(h, "\x00%d\x00", n)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hash the sources under %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// ownedFolder refuses a build folder another user made or can write: the tests
// run what it holds, often as root.
func ownedFolder(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a folder (a link?): refusing to run what it holds", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to another user: refusing to run what it holds", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %v): refusing to run what it holds", dir, fi.Mode().Perm())
	}
	return nil
}

// prune removes this user's build folders nobody used for staleAfter.
func prune(keep string) {
	ents, _ := os.ReadDir(filepath.Dir(keep))
	for _, e := range ents {
		p := filepath.Join(filepath.Dir(keep), e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) || p == keep {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAfter && ownedFolder(p) == nil {
			os.RemoveAll(p)
		}
	}
}
