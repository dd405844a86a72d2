//go:build !darwin && !linux

package main

import (
	"context"
	"log/slog"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// platformBackends is empty where oz0-node has no sandbox backend: every plugin
// runs at tier 0, and the node says so.
func platformBackends() []sandbox.Backend { return nil }

// platform offers the probe nothing: tier 0.
func platform() probe.Platform { return probe.Platform{} }

// sweepStale has nothing to sweep here: Seatbelt leaves no state behind.
func sweepStale(ctx context.Context, dataDir string) (int, error) { return 0, nil }

// backendTool: no backend, no program.
func backendTool(string) string { return "" }

// followDenials: no sandbox here, so no denials.
func followDenials(context.Context, string, *slog.Logger) func(string) []api.SandboxDenial {
	return nil
}
