//go:build !linux

package install

import "os/exec"

// dieWithUs: only Linux has a parent-death signal; elsewhere a helper outlives a
// killed install until it finishes, and the next start cleans staging.
func dieWithUs(c *exec.Cmd) {}
