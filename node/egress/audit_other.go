//go:build !unix

package egress

import "os"

// lockFile is a no-op where flock is not available.
func lockFile(*os.File) func() { return func() {} }
