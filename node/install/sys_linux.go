package install

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// exchangeDirs swaps two folders in one step (renameat2 RENAME_EXCHANGE).
func exchangeDirs(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// dieWithUs makes a helper (git, pip, npm) die when the install process does, so an
// install killed with SIGKILL leaves no process writing into staging.
func dieWithUs(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
