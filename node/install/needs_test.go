package install

import (
	"runtime"

	"os"
	"oz0.ai/node/node/sandbox"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/manifest"
)

// A plugin whose only server is remote installs although its repository's
// package.json and requirements.txt (its own tooling) name dependencies that
// cannot be fetched: nothing that runs here uses them, so neither is built, and
// the install record, the ledger and the install output say so.
func TestRemoteOnlyPluginBuildsNothing(t *testing.T) {
	d := newData(t)
	repo, _ := newRepo(t, "remote-only-tooling", nil)
	in := mustInstall(t, d, Options{Source: repo})
	want := []string{
		"requirements.txt not built: nothing that runs here uses Python (server docs (remote))",
		"package.json not built: nothing that runs here uses Node.js (server docs (remote))",
	}
	if strings.Join(in.Notes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("notes %q, want %q", in.Notes, want)
	}
	for _, p := range []string{"node_modules", ".oz0", "package-lock.json"} {
		if _, err := os.Lstat(filepath.Join(in.Dir, p)); err == nil {
			t.Errorf("%s built for a plugin that runs nothing of its own", p)
		}
	}
	if es := ledger(t, d, "remote-only-tooling"); len(es) != 1 || strings.Join(es[0].Notes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ledger %+v", es)
	}
	// The same files with a server that runs the plugin's own script: both builds
	// are made, and strict refuses the dependencies as before.
	withServer, _ := newRepo(t, "remote-only-tooling", map[string]string{
		".mcp.json": `{"mcpServers": {"cli": {"command": "${CLAUDE_PLUGIN_ROOT}/bin/cli"}}}`,
	})
	installErr(t, newData(t), Options{Source: withServer}, "oz0-fixtures-never-published")
}

// What each command line of a server or hook may use: a runtime by name, a
// script by its extension; a program the node does not know, or a script of the
// plugin's own with no telling extension, may use either build.
func TestBuildNeeds(t *testing.T) {
	srv := func(cmd string, args ...string) manifest.Server {
		return manifest.Server{Name: "s", Command: cmd, Args: args}
	}
	hook := func(cmd string) manifest.Hook { return manifest.Hook{Event: "PreToolUse", Command: cmd} }
	for _, c := range []struct {
		name         string
		servers      []manifest.Server
		hooks        []manifest.Hook
		node, python bool
	}{
		{"nothing", nil, nil, false, false},
		{"remote", []manifest.Server{{Name: "r", Remote: &manifest.Remote{Type: "http", URL: "https://x.example/mcp"}}}, nil, false, false},
		{"python server", []manifest.Server{srv("python3", "${CLAUDE_PLUGIN_ROOT}/server.py")}, nil, false, true},
		{"uv run", []manifest.Server{srv("uv", "run", "--directory", "${CLAUDE_PLUGIN_ROOT}", "server")}, nil, false, true},
		{"node server", []manifest.Server{srv("node", "${CLAUDE_PLUGIN_ROOT}/dist/index.js")}, nil, true, false},
		{"bun server", []manifest.Server{srv("bun", "run", "${CLAUDE_PLUGIN_ROOT}/src/index.ts")}, nil, true, false},
		{"docker", []manifest.Server{srv("docker", "run", "-i", "--rm", "ghcr.io/x/y")}, nil, false, false},
		{"launcher", []manifest.Server{srv("npx", "-y", "pkg@1")}, nil, false, false},
		{"plugin binary", []manifest.Server{srv("${CLAUDE_PLUGIN_ROOT}/bin/server")}, nil, true, true},
		{"unknown program", []manifest.Server{srv("make", "serve")}, nil, true, true},
		{"hook script by interpreter", nil, []manifest.Hook{hook(`python3 "${CLAUDE_PLUGIN_ROOT}/hooks/check.py"`)}, false, true},
		{"hook shell script", nil, []manifest.Hook{hook(`bash ${CLAUDE_PLUGIN_ROOT}/hooks/fmt.sh`)}, true, true},
		{"hook echo", nil, []manifest.Hook{hook(`echo '{"decision": "approve"}'`)}, false, false},
		{"hook npx in a pipeline", nil, []manifest.Hook{hook(`cat | FOO=1 npx prettier --check`)}, true, false},
		{"hook exec form", nil, []manifest.Hook{{Event: "Stop", Command: "node", Args: []string{"${CLAUDE_PLUGIN_ROOT}/h.mjs"}}}, true, false},
	} {
		m := &manifest.Manifest{Servers: c.servers, Hooks: c.hooks}
		n := buildNeeds(m, func(s string) bool { return c.name == "launcher" })
		if n.node != c.node || n.python != c.python {
			t.Errorf("%s: node=%v python=%v, want %v %v (%s)", c.name, n.node, n.python, c.node, c.python, n.runs)
		}
	}
}

// A server whose runtime the node lacks (bun, where bun is not installed)
// installs, with a note in the record, the ledger and the install's log: it is
// held back until the runtime is installed, which needs no reinstall.
func TestMissingRuntimeIsNotedAtInstall(t *testing.T) {
	if _, ok := sandbox.FindProgram(runtime.GOOS, "bun", nil); ok {
		t.Skip("bun is installed here: a server without its runtime is not tested")
	}
	d := newData(t)
	repo, _ := newRepo(t, "bun-server", nil)
	var logb strings.Builder
	in, err := Install(t.Context(), d, Options{Source: repo, Log: slogTo(&logb)})
	if err != nil {
		t.Fatal(err)
	}
	want := "server main starts bun, which is not installed on this node (looked on PATH " + sandbox.ProgramPath(runtime.GOOS, nil) + "): it does not start until it is (finding runtime-missing); installing it later needs no reinstall"
	if len(in.Notes) != 1 || in.Notes[0] != want {
		t.Fatalf("notes %q, want %q", in.Notes, want)
	}
	if !strings.Contains(logb.String(), "level=WARN") || !strings.Contains(logb.String(), "starts bun") {
		t.Fatalf("no warning at install:\n%s", logb.String())
	}
	if es := ledger(t, d, "bun-server"); len(es) != 1 || len(es[0].Notes) != 1 {
		t.Fatalf("ledger %+v", es)
	}
	// A hook that starts a missing runtime is noted too; shell builtins are not.
	hooks, _ := newRepo(t, "", map[string]string{
		"plugin.json":      pluginJSON("bun-hooks"),
		"hooks/hooks.json": `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "bun run ${CLAUDE_PLUGIN_ROOT}/stop.ts"}, {"type": "command", "command": "cd /tmp && true"}]}]}}`,
	})
	in = mustInstall(t, newData(t), Options{Source: hooks})
	if len(in.Notes) != 1 || !strings.Contains(in.Notes[0], "a Stop hook starts bun, which is not installed") {
		t.Fatalf("notes %q", in.Notes)
	}
}
