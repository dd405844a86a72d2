package main

import (
	"context"

	backenddarwin "oz0.ai/node/backend_darwin"
	"oz0.ai/node/node/sandbox"
)

// platformBackends are the sandbox backends this OS offers, in the order auto
// prefers them: on macOS, Seatbelt only.
func platformBackends() []sandbox.Backend {
	return []sandbox.Backend{backenddarwin.New()}
}

// sweepStale has nothing to sweep here: Seatbelt leaves no state behind.
func sweepStale(ctx context.Context, dataDir string) (int, error) { return 0, nil }

// backendTool is the program a backend runs, whose identity keys the probe cache.
func backendTool(string) string { return backenddarwin.SandboxExec }
