package main

import (
	"context"
	"log/slog"
	"os"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/policy"
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
	pc := loadProbeCache(d)
	defer pc.save()
	for _, b := range platformBackends() {
		if want != "" && b.Name() != want {
			continue
		}
		if _, ok := pc.cached(b.Name()); ok {
			return &install.BuildSandbox{Backend: b, NodeBinary: exe}
		}
		pr := b.Probe(ctx)
		pc.record(pr)
		if pr.Works {
			return &install.BuildSandbox{Backend: b, NodeBinary: exe}
		}
		slog.Debug("build sandbox backend does not work", "backend", b.Name(), "err", pr.Err)
	}
	return nil
}
