//go:build !darwin

package backenddarwin

import "oz0.ai/node/node/sandbox"

// HostOptions are the host facts a render on a Mac would find; away from macOS
// there are none (no developer folder, no terminal).
func HostOptions(s *sandbox.Spec) Options { return Options{} }
