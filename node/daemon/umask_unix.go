//go:build unix

package daemon

import "syscall"

// currentUmask reads the umask without changing it for long (there is no getter).
func currentUmask() uint32 {
	m := syscall.Umask(0o077)
	syscall.Umask(m)
	return uint32(m)
}
