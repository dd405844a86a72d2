//go:build !unix

package probe

import "os"

func inode(os.FileInfo) uint64   { return 0 }
func ownedByMe(os.FileInfo) bool { return false } // no cache where ownership cannot be read
func kernelRelease() string      { return "" }
