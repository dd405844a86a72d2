package main

import (
	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/sandbox"
)

// platformBackends are the sandbox backends this OS offers, in the order auto
// prefers them: on Linux, bwrap (fast start) then gVisor.
func platformBackends() []sandbox.Backend { return backendlinux.Backends() }
