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
		return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)), uint64(st.Ino)
	}
	return fi.ModTime(), 0
}
