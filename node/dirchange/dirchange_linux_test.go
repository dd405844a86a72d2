package dirchange_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/dirchange"
)

func newWatch(t *testing.T) *dirchange.Watch {
	t.Helper()
	w, err := dirchange.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func gen(t *testing.T, w *dirchange.Watch) uint64 {
	t.Helper()
	g, ok := w.Gen()
	if !ok {
		t.Fatal("the watch cannot tell its generation")
	}
	return g
}

// mountsChanged reports whether this process's mount table changed since it
// was made. Tests elsewhere on the machine mount (a network namespace, a
// sandbox), and the watch then forgets its folders and moves the generation on
// by design: a check that the generation did not move holds only while the
// table did not change.
func mountsChanged(t *testing.T) func() bool {
	t.Helper()
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func() bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0
	}
}

// Every kind of change to a watched folder's entries moves the generation on;
// nothing else does.
func TestEveryChangeMovesTheGeneration(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "values.json")
	if err := os.WriteFile(file, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWatch(t)
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	changes := []struct {
		name string
		do   func() error
	}{
		{"written in place", func() error {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("2"), 5)
			return err
		}},
		{"mode changed", func() error { return os.Chmod(file, 0o644) }},
		{"replaced by a rename", func() error {
			tmp := filepath.Join(dir, ".tmp")
			if err := os.WriteFile(tmp, []byte(`{"a":3}`), 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, file)
		}},
		{"removed", func() error { return os.Remove(file) }},
		{"created", func() error { return os.WriteFile(file, nil, 0o600) }},
		{"a link made in its place", func() error {
			if err := os.Remove(file); err != nil {
				return err
			}
			return os.Symlink("/etc/hostname", file)
		}},
	}
	for _, c := range changes {
		// As a caller does: the folder added (again, if the mount table
		// made the watch forget it) before the generation is read.
		if err := w.Add(nil, []string{dir}); err != nil {
			t.Fatal(err)
		}
		moved := mountsChanged(t)
		g0 := gen(t, w)
		if g := gen(t, w); g != g0 && !moved() {
			t.Fatalf("before %s: the generation moved with nothing changed (%d, %d)", c.name, g0, g)
		}
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if g := gen(t, w); g == g0 {
			t.Errorf("%s: the generation did not move", c.name)
		}
	}
}

// A folder renamed away (its path may now name another folder) moves the
// generation on and is forgotten: added again by path, the folder now there is
// the one watched. A parent watched for itself alone does not move on its
// entries' changes, only on its own renaming.
func TestARenamedFolderIsForgottenAndAParentSeenOnlyForItself(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w := newWatch(t)
	if err := w.Add([]string{parent}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	moved := mountsChanged(t)
	g0 := gen(t, w)
	if err := os.WriteFile(filepath.Join(parent, "status.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if g := gen(t, w); g != g0 && !moved() {
		t.Errorf("a file written in the parent watched for itself moved the generation")
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	g1 := gen(t, w)
	if g1 == g0 {
		t.Fatal("the folder renamed away did not move the generation")
	}
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	g2 := gen(t, w)
	if err := os.WriteFile(filepath.Join(dir, "x.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if g := gen(t, w); g == g2 {
		t.Error("a file written in the new folder at the path did not move the generation: the old one is still the one watched")
	}
	if err := w.Add([]string{parent}, nil); err != nil {
		t.Fatal(err)
	}
	g3 := gen(t, w)
	if err := os.Rename(parent, parent+".moved"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent + ".moved") })
	if g := gen(t, w); g == g3 {
		t.Error("the parent renamed did not move the generation")
	}
}

// A change made before Gen is called is never missed, while other callers
// drain the queue at the same moment.
func TestNoChangeIsMissedUnderConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	w := newWatch(t)
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				w.Gen()
			}
		})
	}
	missed := 0
	for i := range 2000 {
		// As a caller does: added before each read of the generation (the
		// mount table changing makes the watch forget its folders).
		if err := w.Add(nil, []string{dir}); err != nil {
			t.Fatal(err)
		}
		g0, ok := w.Gen()
		if !ok {
			continue // busy: a caller then reads its inputs
		}
		if err := os.WriteFile(file, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		if g, ok := w.Gen(); ok && g == g0 {
			missed++
		}
	}
	stop.Store(true)
	wg.Wait()
	if missed > 0 {
		t.Errorf("%d of 2000 changes made before Gen was read did not move the generation", missed)
	}
}

// A folder the watch forgot between a caller's Add and its Gen (its path renamed
// away and back here; the mount table changing does the same) and changed
// while unwatched: adding it again moves the generation on, so the one the
// caller kept does not match.
func TestAFolderWatchedAgainMovesTheGeneration(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w := newWatch(t)
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	kept := gen(t, w) // the rename drained: the folder is forgotten
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "values.json"), []byte(`{"allow":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	if g := gen(t, w); g == kept {
		t.Error("a file written while its folder was unwatched, the folder then added again: the generation did not move")
	}
}

// A file system whose changes may not pass through this kernel is refused.
func TestAFileSystemNotLocalIsRefused(t *testing.T) {
	w := newWatch(t)
	if err := w.Add(nil, []string{"/proc/self"}); !errors.Is(err, dirchange.ErrUnsupported) {
		t.Errorf("watching /proc: %v; want ErrUnsupported", err)
	}
	if err := w.Add(nil, []string{filepath.Join(t.TempDir(), "absent")}); err == nil {
		t.Error("watching a folder that does not exist: no error")
	}
}

// A file system mounted over a watched folder (its path now names another
// folder, with no event of the one watched) moves the generation on and makes
// the folder be added again; the mount table's follower then rests.
func TestAFolderMountedOverIsForgotten(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: mounting over a folder needs root")
	}
	dir := t.TempDir()
	w := newWatch(t)
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	g0 := gen(t, w)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("not tested: mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	var g1 uint64
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		if g1 = gen(t, w); g1 != g0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a tmpfs mounted over the folder did not move the generation within a second")
		}
	}
	moved := mountsChanged(t)
	time.Sleep(50 * time.Millisecond)
	if g := gen(t, w); g != g1 && !moved() {
		t.Errorf("the generation kept moving after one mount (%d, then %d)", g1, g)
	}
	if err := w.Add(nil, []string{dir}); err != nil {
		t.Fatal(err)
	}
	g2 := gen(t, w)
	if err := os.WriteFile(filepath.Join(dir, "values.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if g := gen(t, w); g == g2 {
		t.Error("a file written on the mounted file system did not move the generation: the folder under it is still the one watched")
	}
}
