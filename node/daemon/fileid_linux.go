package daemon

import (
	"os"
	"syscall"
	"time"
)

// statIdentity is a file's change time (unlike its modification time, no call
// sets it to a time of the caller's choosing), its inode and its number of
// names (links).
func statIdentity(fi os.FileInfo) (time.Time, uint64, uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)), uint64(st.Ino), uint64(st.Nlink)
	}
	return fi.ModTime(), 0, 1
}
