//go:build !linux

package install

// childBox is the build sandbox an install child uses: none off Linux.
func childBox(string) *BuildSandbox { return nil }
