package main

import (
	"cmp"
	"context"
	"log/slog"
	"os"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// buildSandbox picks the sandbox strict builds run npm in: the running node's
// backend when it has one, else the first of this OS's backends whose probe
// passes (a pass the data folder's probe cache holds under the current key counts,
// so an install starts no probe sandbox of its own). nil means none works here (tier 0): npm then runs as the node's user and
// the build record says so.
func buildSandbox(ctx context.Context, d datadir.Dir, st *api.Status) *install.BuildSandbox {
	want := ""
	if st != nil {
		want = st.Node.Backend
	}
	if want == policy.BackendNone {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	// The first backend that works (the running node's, when one runs), from the
	// probe cache or probed now.
	r, err := probe.Run(ctx, platform(), cmp.Or(want, "auto"), probe.LoadCache(d, platform()))
	if err != nil || r.Tier == 0 {
		slog.Debug("no build sandbox backend works", "err", err)
		return nil
	}
	return &install.BuildSandbox{Backend: r.Works[r.Backend], NodeBinary: exe}
}
