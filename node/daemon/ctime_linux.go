package daemon

import (
	"os"
	"syscall"
	"time"
)

// ctime is when a file's content or metadata last changed: unlike its
// modification time, no call sets it to a time of the caller's choosing.
func ctime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
	}
	return fi.ModTime()
}
