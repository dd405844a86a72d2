package bench

import (
	"path/filepath"
	"syscall"
	"testing"
)

// failOnNullNetns fails the benchmark if gVisor's null-netns is still mounted in
// the data folder when it ends (a leak: its last user unmounts it), and unmounts
// it so the folder can be removed.
func failOnNullNetns(b testing.TB, data string) {
	b.Cleanup(func() {
		if syscall.Unmount(filepath.Join(data, "run", "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
			for syscall.Unmount(filepath.Join(data, "run", "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
			}
			b.Error("runsc's null-netns was left mounted in the data folder after its sandboxes ended")
		}
	})
}
