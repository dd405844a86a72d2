//go:build unix

package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on f and returns its release.
func lockFile(f *os.File) func() {
	fd := int(f.Fd())
	for unix.Flock(fd, unix.LOCK_EX) == unix.EINTR {
	}
	return func() { unix.Flock(fd, unix.LOCK_UN) }
}
