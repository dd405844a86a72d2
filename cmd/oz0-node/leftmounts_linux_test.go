package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// failOnLeftMounts unmounts whatever is still mounted below dir when a test ends
// (the sandboxes' null-netns of gVisor, above all) and fails the test if it had
// to: a leak is caught, not hidden, and the temp folder can be removed.
// Register it before anything that stops the node or sandboxes, so it runs after.
func failOnLeftMounts(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		left := mountsBelow(t, dir)
		for _, p := range left {
			for syscall.Unmount(p, syscall.MNT_DETACH) == nil {
			}
		}
		if len(left) > 0 {
			t.Errorf("mounts left below the test's folder after its node and sandboxes ended (unmounted now): %v", left)
		}
	})
}

func mountsBelow(t *testing.T, dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := strings.ReplaceAll(f[4], `\040`, " ")
		if strings.HasPrefix(p, dir+"/") && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
