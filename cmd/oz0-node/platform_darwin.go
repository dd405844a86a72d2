package main

import (
	"context"
	"log/slog"
	"time"

	backenddarwin "oz0.ai/node/backend_darwin"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// platformBackends are the sandbox backends this OS offers, in the order auto
// prefers them: on macOS, Seatbelt only.
func platformBackends() []sandbox.Backend {
	return []sandbox.Backend{backenddarwin.New()}
}

// platform is what the probe needs of this OS: its backend and its program.
func platform() probe.Platform {
	return probe.Platform{Backends: platformBackends(), Tool: backendTool}
}

// sweepStale has nothing to sweep here: Seatbelt leaves no state behind.
func sweepStale(ctx context.Context, dataDir string) (int, error) { return 0, nil }

// backendTool is the program a backend runs, whose identity keys the probe cache.
func backendTool(string) string { return backenddarwin.SandboxExec }

// followDenials follows the kernel's Seatbelt violation reports for this node's
// profiles while ctx lives (restarting the stream if it ends) and gives each
// plugin's recent ones to status.
func followDenials(ctx context.Context, backend string, log *slog.Logger) func(string) []api.SandboxDenial {
	if backend != policy.BackendSeatbelt {
		return nil
	}
	dl := backenddarwin.NewDenialLog(20)
	go func() {
		for ctx.Err() == nil {
			err := backenddarwin.FollowDenials(ctx, func(d backenddarwin.Denial) {
				log.Warn("sandbox denied", "plugin", d.Plugin, "process", d.Process, "pid", d.PID, "operation", d.Operation, "target", d.Target)
				dl.Add(d)
			})
			if err != nil {
				log.Warn("sandbox denials are not followed", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}()
	return func(plugin string) []api.SandboxDenial {
		var out []api.SandboxDenial
		for _, d := range dl.Recent(plugin) {
			out = append(out, api.SandboxDenial{Time: d.Time.UTC().Format(time.RFC3339Nano), Process: d.Process, PID: d.PID,
				Operation: d.Operation, Target: d.Target, Count: d.Count, Hint: d.Hint()})
		}
		return out
	}
}
