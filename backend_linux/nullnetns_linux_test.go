package backendlinux

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
)

// nsfsMounts counts the mounts at p in this process's mount table.
func nsfsMounts(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " "+p+" ")
}

// staleNullNetns makes what a SIGKILLed user leaves: an nsfs bind mount at
// <state>/null-netns, unmounted at the test's end whatever happens.
func staleNullNetns(t *testing.T, state string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not tested: bind mounts need root (as in CI)")
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(state, "null-netns")
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("/proc/self/ns/net", p, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("make a stale null-netns mount: %v", err)
	}
	t.Cleanup(func() {
		for syscall.Unmount(p, syscall.MNT_DETACH) == nil {
		}
	})
	return p
}

// holdAsOtherProcess makes another process a user of state's null-netns (as a
// running node is for an exec on its data folder) until the test kills it.
func holdAsOtherProcess(t *testing.T, state string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("not tested: flock(1) is not installed")
	}
	ready := filepath.Join(t.TempDir(), "ready")
	c := exec.Command("flock", "--shared", usersLockPath(state), "sh", "-c", "touch "+ready+"; exec sleep 60")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killOther(c, usersLockPath(state)) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("the other user did not take the lock")
		}
	}
}

// killOther SIGKILLs the other user (flock and the command holding its lock).
// It waits until the lock is free: sleep, not our child, ends on its own time.
func killOther(c *exec.Cmd, lock string) {
	syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	c.Wait()
	f, err := os.Open(lock)
	if err != nil {
		return
	}
	defer f.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			return
		}
	}
}

// TestNullNetnsSweepSparesAnotherProcessesMount: the start-up sweep and a first
// sandbox's start leave the mount of a state folder another process still uses,
// and remove it once that process is gone (killed: it could not clean up).
func TestNullNetnsSweepSparesAnotherProcessesMount(t *testing.T) {
	data := t.TempDir()
	state := filepath.Join(data, "run", "runsc")
	p := staleNullNetns(t, state)
	other := holdAsOtherProcess(t, state)
	if _, err := Sweep(context.Background(), data, time.Hour); err != nil {
		t.Logf("sweep: %v", err)
	}
	if nsfsMounts(t, p) != 1 {
		t.Fatal("the sweep unmounted the null-netns of a live process's sandbox")
	}
	holdNullNetns(state)
	if nsfsMounts(t, p) != 1 {
		t.Error("a first start unmounted the null-netns of a live process's sandbox")
	}
	releaseNullNetns(state)
	if nsfsMounts(t, p) != 1 {
		t.Error("a process not the last user unmounted the null-netns")
	}
	killOther(other, usersLockPath(state))
	if _, err := Sweep(context.Background(), data, time.Hour); err != nil {
		t.Logf("sweep: %v", err)
	}
	if c := nsfsMounts(t, p); c != 0 {
		t.Errorf("%d null-netns mounts left after the sweep, its last user gone", c)
	}
}

// TestNullNetnsFirstStartSweepsStale: a stale mount (its user was SIGKILLed) goes
// at the next first gVisor start of any process (exec, hook, install), not only
// at a node's start-up sweep; stacked ones too.
func TestNullNetnsFirstStartSweepsStale(t *testing.T) {
	state := filepath.Join(t.TempDir(), "run", "runsc")
	p := staleNullNetns(t, state)
	if err := syscall.Mount("/proc/self/ns/net", p, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	holdNullNetns(state)
	c := nsfsMounts(t, p)
	releaseNullNetns(state)
	if c != 0 {
		t.Errorf("%d stale null-netns mounts left at a first start", c)
	}
}

// TestNullNetnsUnmountFollowsNoLink: links planted in the data folder (run/runsc,
// or null-netns itself, pointing at an nsfs mount elsewhere) do not turn the
// sweep into an unmount outside the data folder; nor is a mount other than nsfs
// at null-netns taken down.
func TestNullNetnsUnmountFollowsNoLink(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	target := staleNullNetns(t, outside)

	data := t.TempDir()
	if err := os.Mkdir(filepath.Join(data, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(data, "run", "runsc")); err != nil {
		t.Fatal(err)
	}
	Sweep(context.Background(), data, time.Hour)
	if nsfsMounts(t, target) != 1 {
		t.Fatal("the sweep followed run/runsc, a link, and unmounted a mount outside the data folder")
	}

	data2 := t.TempDir()
	state2 := filepath.Join(data2, "run", "runsc")
	if err := os.MkdirAll(state2, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(state2, "null-netns")); err != nil {
		t.Fatal(err)
	}
	Sweep(context.Background(), data2, time.Hour)
	holdNullNetns(state2)
	releaseNullNetns(state2)
	if nsfsMounts(t, target) != 1 {
		t.Fatal("null-netns, a link, was followed to an unmount outside the data folder")
	}

	// A bind mount of an ordinary file at null-netns is not runsc's: left alone.
	data3 := t.TempDir()
	state3 := filepath.Join(data3, "run", "runsc")
	if err := os.MkdirAll(state3, 0o700); err != nil {
		t.Fatal(err)
	}
	p3 := filepath.Join(state3, "null-netns")
	os.WriteFile(p3, nil, 0o444)
	src := filepath.Join(t.TempDir(), "file")
	os.WriteFile(src, []byte("x"), 0o444)
	if err := syscall.Mount(src, p3, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(p3, syscall.MNT_DETACH) })
	Sweep(context.Background(), data3, time.Hour)
	if nsfsMounts(t, p3) != 1 {
		t.Error("the sweep unmounted a mount at null-netns that is not a network namespace")
	}
}

// TestGVisorNullNetnsLastUserAcrossProcesses runs real gVisor sandboxes: one of
// this process's ending leaves the mount while another process is a user, and
// with no other user left nothing is mounted after the last one ends.
func TestGVisorNullNetnsLastUserAcrossProcesses(t *testing.T) {
	g := backendFor(t, policy.BackendGVisor)
	data := t.TempDir()
	chmodChain(t, data)
	state := filepath.Join(data, "run", "runsc")
	p := filepath.Join(state, "null-netns")
	t.Cleanup(func() {
		for syscall.Unmount(p, syscall.MNT_DETACH) == nil {
		}
	})
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	other := holdAsOtherProcess(t, state)
	if err := runProbe(context.Background(), g, probeSpec(data)); err != nil {
		t.Fatal(err)
	}
	if nsfsMounts(t, p) == 0 {
		t.Fatal("no null-netns mount after a gVisor sandbox ran while another process uses the folder: runsc no longer makes one, or it was taken from that process")
	}
	killOther(other, usersLockPath(state))
	if err := runProbe(context.Background(), g, probeSpec(data)); err != nil {
		t.Fatal(err)
	}
	if c := nsfsMounts(t, p); c != 0 {
		t.Errorf("%d null-netns mounts left after the last user's sandbox ended", c)
	}
}

// TestGVisorNullNetnsNodeInAnotherMountNamespace runs real gVisor sandboxes: a
// node in its own mount namespace (as under unshare --mount) keeps a sandbox
// running while this process runs one on the same data folder; this process's
// namespace has no null-netns mount left once its own sandbox ended.
func TestGVisorNullNetnsNodeInAnotherMountNamespace(t *testing.T) {
	b := backendFor(t, policy.BackendGVisor)
	n := newTestNode(t, b, "demo")
	n.spec("demo", "true") // the home exists, as after a start
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	node := exec.Command(self, b.Name(), n.dir.Root)
	node.Args[0] = reexec.Argv0("test-node")
	node.Env = []string{}
	node.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, _ := node.StdoutPipe()
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		node.Process.Kill()
		node.Wait()
		Sweep(context.Background(), n.dir.Root, time.Hour) // its containers, as the next start does
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("the node did not start its sandbox: %q", line)
	}
	if err := runProbe(context.Background(), b, probeSpec(n.dir.Root)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(n.dir.Run(), "runsc", "null-netns")
	if c := nsfsMounts(t, p); c != 0 {
		t.Errorf("%d null-netns mounts left in this mount namespace after its last sandbox ended (the other namespace's node kept it)", c)
	}
}
