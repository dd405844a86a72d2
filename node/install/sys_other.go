//go:build !linux

package install

import (
	"os"
	"os/exec"
)

// exchangeDirs swaps two folders. Without an atomic exchange here it takes three
// renames; a crash between them leaves b missing until the next install.
func exchangeDirs(a, b string) error {
	tmp := a + ".swap"
	if err := os.Rename(b, tmp); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		os.Rename(tmp, b)
		return err
	}
	return os.Rename(tmp, a)
}

// dieWithUs: only Linux has a parent-death signal; elsewhere a helper outlives a
// killed install until it finishes, and the next start cleans staging.
func dieWithUs(c *exec.Cmd) {}
