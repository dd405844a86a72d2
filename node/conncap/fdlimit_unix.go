//go:build linux || darwin

package conncap

import "golang.org/x/sys/unix"

// descriptorLimit is the node's open-file limit (its soft RLIMIT_NOFILE, which
// the Go runtime raises to the hard limit at start).
func descriptorLimit() int {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int(min(r.Cur, 1<<20))
}
