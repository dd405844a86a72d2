package install

import (
	"os/exec"
	"syscall"
)

// dieWithUs makes a helper (git, pip, npm) die when the install process does, so an
// install killed with SIGKILL leaves no process writing into staging.
func dieWithUs(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
