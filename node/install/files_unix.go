//go:build unix

package install

import (
	"io/fs"
	"syscall"
)

// oNoFollow opens a file of the tree only if it is not a symlink.
const oNoFollow = syscall.O_NOFOLLOW

// linkCount is how many names a file has: a hard link into the tree is refused.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
