//go:build !linux && !darwin

package daemon

import (
	"os"
	"time"
)

func ctime(fi os.FileInfo) time.Time { return fi.ModTime() }
