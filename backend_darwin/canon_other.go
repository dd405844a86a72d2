//go:build !darwin

package backenddarwin

// resolveSymlinks is the identity away from macOS: the paths a test renders do not
// exist here, and this host's symlinks say nothing about a Mac's. The textual
// /tmp, /var, /etc → /private mapping in Canonical still applies.
func resolveSymlinks(p string) (string, error) { return p, nil }
