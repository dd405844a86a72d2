package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// A server whose program is on no folder of the PATH it runs with (bun, where
// bun is not installed) is held back with a runtime-missing finding naming the
// program and where it was looked for, not started into a crash loop. Installed
// later, it is found at the next decision, with no reinstall.
func TestMissingRuntimeHoldsTheServerUntilInstalled(t *testing.T) {
	d := dataFolder(t, "bun-server")
	n := strictNode(d, config.Run{})
	p, err := n.One("bun-server")
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := p.Decision.Server("main")
	if tg.Action != policy.Refused || !strings.Contains(tg.Refusal(), "starts bun, which is not installed on this node (looked on PATH /usr/local/bin:/usr/bin:/bin)") {
		t.Fatalf("bun server without bun: %s %q", tg.Action, tg.Refusal())
	}
	found := false
	for _, f := range p.Decision.Findings {
		found = found || f.Code == api.CodeRuntimeMissing && f.Subject == "bun-server/main" && strings.Contains(f.Fix, "no reinstall")
	}
	if !found {
		t.Fatalf("no runtime-missing finding: %+v", p.Decision.Findings)
	}

	// The same server with a PATH of its own (its manifest's env), where bun
	// appears after the install: the next decision starts it.
	bin := t.TempDir()
	mcp := filepath.Join(d.PluginCommit("bun-server", commitA), ".mcp.json")
	if err := os.WriteFile(mcp, []byte(`{"mcpServers": {"main": {"command": "bun", "args": ["run", "x.ts"], "env": {"PATH": "`+bin+`:/usr/bin:/bin"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n = strictNode(d, config.Run{})
	if p, err = n.One("bun-server"); err != nil {
		t.Fatal(err)
	}
	if tg, _ := p.Decision.Server("main"); tg.Action != policy.Refused {
		t.Fatalf("before bun is installed: %s", tg.Action)
	}
	if err := os.WriteFile(filepath.Join(bin, "bun"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err = n.One("bun-server"); err != nil {
		t.Fatal(err)
	}
	if tg, _ := p.Decision.Server("main"); tg.Action != policy.Sandboxed {
		t.Fatalf("after bun is installed: %s %v", tg.Action, tg.Reasons)
	}
}

// A server started through a launcher runs the managed runtime install resolved
// for it, so its launcher's name is not looked up.
func TestLauncherServerIsNotLookedUp(t *testing.T) {
	d := dataFolder(t, "bun-server")
	rec, err := installed.LookupCommit(d, "bun-server", commitA)
	if err != nil {
		t.Fatal(err)
	}
	rec.Launchers = []installed.Launch{{Server: "main", Launcher: "bunx", Package: "x", Version: "1.0.0", Runtime: "bun", Entry: "e.js", Command: "x"}}
	if err := installed.Activate(d, rec.Meta); err != nil {
		t.Fatal(err)
	}
	n := strictNode(d, config.Run{})
	p, err := n.One("bun-server")
	if err != nil {
		t.Fatal(err)
	}
	if got := missingPrograms(p.Manifest, p.Installed, "linux"); len(got) != 0 {
		t.Fatalf("launcher server looked up: %v", got)
	}
}
