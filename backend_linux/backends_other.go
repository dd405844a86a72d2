//go:build !linux

package backendlinux

import (
	"fmt"

	"oz0.ai/node/node/sandbox"
)

// Backends is empty where Linux sandboxes cannot run.
func Backends() []sandbox.Backend { return nil }

// New fails where Linux sandboxes cannot run.
func New(name string) (sandbox.Backend, error) {
	return nil, fmt.Errorf("sandbox backend %q: %w on this OS", name, sandbox.ErrUnavailable)
}

// LandlockABI: Landlock does not exist on this OS.
func LandlockABI() int { return 0 }
