//go:build !unix

package audit

import "os"

// lockFile is a no-op where flock is not available: one writer per stream.
func lockFile(*os.File) func() { return func() {} }
