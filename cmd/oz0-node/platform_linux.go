package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/doctor"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// platformBackends are the sandbox backends this OS offers, in the order auto
// prefers them: on Linux, bwrap (fast start) then gVisor, then Landlock (where
// user namespaces are refused).
func platformBackends() []sandbox.Backend { return backendlinux.Backends() }

// platform is what the probe needs of this OS: its backends, their programs, and
// the kernel settings that keep them from creating namespaces.
func platform() probe.Platform {
	return probe.Platform{Backends: platformBackends(), Tool: backendTool, Explain: usernsCause}
}

// usernsCause names the kernel setting that keeps an installed backend from
// creating its namespaces, with its fix, as `oz0-node doctor` does ("" when the
// failure is something else).
func usernsCause(backend string, pr sandbox.Probe, errText string) (cause, fix string) {
	if pr.Works || pr.Version == "" || backend == policy.BackendLandlock {
		return "", "" // Landlock needs no namespace
	}
	u := backendlinux.DoctorUserns()
	if backend == policy.BackendGVisor && u.MaxUserNamespaces != 0 && !strings.Contains(strings.ToLower(errText), "no space left on device") {
		return "", "" // runsc fails in many ways of its own: only a namespace limit is named
	}
	return doctor.UsernsCause(u, errText)
}

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
