package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
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

// uvx lines as published plugins write them, with --python and --env-file
// (`uvx --python 3.12 PKG`, `uvx --env-file ${CLAUDE_PLUGIN_ROOT}/.env PKG`):
// install checks the asked Python against the managed one and says which
// Python to install when it does not hold; the env file is loaded at the
// server's start inside its sandbox, as uvx would (an `export`, quotes and a
// comment read as uvx reads them; the manifest's env keeps its own values).
func TestE2EUVXPythonAndEnvFile(t *testing.T) {
	backend := backendsForE2E(t)[0]
	n := newE2E(t, nil)
	n.stop()
	parent := filepath.Dir(n.data)
	files := filepath.Join(parent, "wheels")
	os.MkdirAll(files, 0o755)
	pyWheel(t, files, "oz0_echo", "1.2.0", "oz0-echo")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/simple/oz0-echo/" {
			fmt.Fprint(w, `<a href="/files/oz0_echo-1.2.0-py3-none-any.whl">a</a>`)
			return
		}
		if p, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok {
			http.ServeFile(w, r, filepath.Join(files, filepath.Base(p)))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	rs, err := installed.LoadRuntimes(mustDataDir(t, n.data))
	if err != nil || rs.Python == nil {
		t.Skipf("not tested: no managed Python here (%v)", err)
	}
	py := rs.Python.Version

	other := writeRepo(t, parent, "uvx-other-python", map[string]string{
		"plugin.json": `{"name": "uvx-other-python", "version": "1.0.0"}`,
		".mcp.json":   `{"mcpServers": {"main": {"command": "uvx", "args": ["--python", "2.7", "--from", "oz0-echo==1.2.0", "oz0-echo"]}}}`,
	})
	out, err := n.oz("plugin", "install", other, "--by", "e2e", "--python-index", srv.URL+"/simple")
	if err == nil || !strings.Contains(out, "asks uvx for Python 2.7 (--python 2.7)") || !strings.Contains(out, "managed Python, "+py+" here") {
		t.Fatalf("install of a server asking for another Python: %v\n%s", err, out)
	}

	repo := writeRepo(t, parent, "uvx-env-file", map[string]string{
		"plugin.json": `{"name": "uvx-env-file", "version": "1.0.0"}`,
		".mcp.json": `{"mcpServers": {"main": {"command": "uvx", "args": ["--python", "` + py + `", "--env-file", "${CLAUDE_PLUGIN_ROOT}/.env", "--from", "oz0-echo==1.2.0", "oz0-echo", "--tools", "getenv"],
  "env": {"KEPT": "from the manifest"}}}}`,
		".env": "# settings\nexport GREETING=\"hello from .env\"\nPLAIN=plain value # a comment\nKEPT=from the file\n",
	})
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e", "--python-index", srv.URL+"/simple"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	n.start("--backend", backend)
	n.waitState("uvx-env-file", "main", api.StateRunning)
	for name, want := range map[string]string{"GREETING": "hello from .env", "PLAIN": "plain value", "KEPT": "from the manifest"} {
		out, err := n.oz("call", "uvx-env-file__getenv", "--arg", "name="+name)
		if err != nil || strings.TrimSpace(out) != want {
			t.Errorf("%s: %v %q, want %q", name, err, out, want)
		}
	}
}

func mustDataDir(t *testing.T, root string) datadir.Dir {
	t.Helper()
	d, err := datadir.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
