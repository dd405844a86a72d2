package backendlinux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSweepRemovesOnlyOldEmptyGroups: a group holding a process is never removed,
// an empty one only once it is older than the minimum age.
func TestSweepRemovesOnlyOldEmptyGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: creating cgroups needs root (as in CI)")
	}
	mounts, err := cgroupMounts()
	if err != nil {
		t.Skipf("not tested: %v", err)
	}
	m, ok := mounts["pids"]
	if !ok {
		t.Skip("not tested: no cgroup v1 pids controller here")
	}
	own, _ := ownCgroups()
	parent := filepath.Join(m, own["pids"])
	empty := filepath.Join(parent, "oz0-sweeptest-empty-00000000")
	busy := filepath.Join(parent, "oz0-sweeptest-busy-00000000")
	for _, d := range []string{empty, busy} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	if _, err := Sweep(context.Background(), t.TempDir(), time.Hour); err != nil {
		t.Logf("sweep: %v", err)
	}
	if _, err := os.Stat(empty); err != nil {
		t.Fatal("an empty group younger than the minimum age was removed (another node may be filling it)")
	}
	if _, err := Sweep(context.Background(), t.TempDir(), 0); err != nil {
		t.Logf("sweep: %v", err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Error("an old enough empty oz0 group was left")
	}
	if _, err := os.Stat(busy); err != nil {
		t.Error("a group holding a process was removed")
	}
}

// A killed node or exec leaves its Landlock sandboxes' private tmps; the next
// start's sweep removes those, never one a live sandbox holds.
func TestSweepRemovesOnlyStaleLandlockTmps(t *testing.T) {
	data := t.TempDir()
	parent := filepath.Join(data, "run", "tmp")
	live, stale := filepath.Join(parent, "oz0-demo-exec-1"), filepath.Join(parent, "oz0-demo-exec-2")
	for _, d := range []string{live, stale} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if n := sweepLandlockTmp(data, time.Hour); n != 0 {
		t.Errorf("the sweep removed %d tmps younger than its minimum age", n)
	}
	if n := sweepLandlockTmp(data, 0); n != 1 {
		t.Errorf("the sweep removed %d tmps, want the stale one", n)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the tmp of a live sandbox was removed: %v", err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("the stale tmp was left")
	}
}
