package daemon

import (
	"os"
	"syscall"
	"time"
)

// statIdentity is a file's change time (unlike its modification time, no call
// sets it to a time of the caller's choosing) and its inode.
func statIdentity(fi os.FileInfo) (time.Time, uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctimespec.Sec, st.Ctimespec.Nsec), st.Ino
	}
	return fi.ModTime(), 0
}
