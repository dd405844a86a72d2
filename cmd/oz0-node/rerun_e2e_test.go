package main

import (
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// Shapes found rerunning published plugins, each installed with `plugin install`
// and run by a strict node on every backend: a manifest whose name has capitals
// (as Claude Code installs "Notion"), installed and run under its lower-case name;
// and a server started through a shell line that clears its environment
// (`env -i PATH="$PATH" …`, as published plugins start npx), which then finds
// its home through the user database — it starts, and that home is the plugin's.
func TestE2ERerunShapesRun(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"capital-name", "env-cleared"}, "--backend", backend)
			n.waitState("capital-name", "main", api.StateRunning)
			if out, err := n.oz("call", "capital-name__echo", "--arg", "text=lower"); err != nil || !strings.Contains(out, "lower") {
				t.Fatalf("the capital-name plugin's tool: %v\n%s", err, out)
			}
			n.waitState("env-cleared", "main", api.StateRunning)
			d, _ := datadir.New(n.data)
			out, err := n.oz("call", "env-cleared__home")
			if err != nil || strings.TrimSpace(out) != d.Home("env-cleared") {
				t.Fatalf("home of a server without HOME: %v\n%q, want %q", err, out, d.Home("env-cleared"))
			}
		})
	}
}
