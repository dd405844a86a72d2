//go:build unix

package datadir

import "syscall"

// SetUmask sets the process umask to 077 so nothing the node creates is readable by
// others unless it says so explicitly; it returns the previous mask.
func SetUmask() int { return syscall.Umask(0o077) }
