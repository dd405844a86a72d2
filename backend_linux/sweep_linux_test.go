package backendlinux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
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
