package main

import (
	"context"
	"log/slog"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/sandbox"
)

// platformBackends are the sandbox backends this OS offers, in the order auto
// prefers them: on Linux, bwrap (fast start) then gVisor.
func platformBackends() []sandbox.Backend { return backendlinux.Backends() }

// sweepStale removes what a killed node left: empty sandbox cgroups older than a
// minute and this data folder's runsc containers and bundles.
func sweepStale(ctx context.Context, dataDir string) (int, error) {
	return backendlinux.Sweep(ctx, dataDir, time.Minute)
}

// backendTool is the program a backend runs, whose identity keys the probe cache.
func backendTool(name string) string { return backendlinux.DoctorToolPath(name) }

// followDenials: bwrap and gVisor report no per-operation denials.
func followDenials(context.Context, string, *slog.Logger) func(string) []api.SandboxDenial {
	return nil
}
