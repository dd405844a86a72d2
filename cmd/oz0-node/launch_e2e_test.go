package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// writeRepo makes a git repository of files under parent/repos/name.
func writeRepo(t *testing.T, parent, name string, files map[string]string) string {
	t.Helper()
	repo := filepath.Join(parent, "repos", name)
	for f, body := range files {
		p := filepath.Join(repo, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commitRepo(t, repo)
	return repo
}

// A plugin whose servers only say `npx -y PKG…` (a pinned version, a bin named
// with -p, and @latest) is resolved at install from the npm registry into the
// plugin's build folder, pinned in its install record and the ledger, and its
// servers start under strict with no egress at all and serve their tools through
// the gateway. A launcher package that needs its install script is refused by name.
func TestE2ENPXServersResolvedAtInstall(t *testing.T) {
	if os.Getenv("OZ0_SKIP_NPM") != "" {
		t.Skip("not tested: OZ0_SKIP_NPM is set, so nothing was installed from the npm registry")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("not tested: npm is not installed (CI installs it)")
	}
	backend := backendsForE2E(t)[0]
	n := newE2E(t, nil)
	n.stop()
	parent := filepath.Dir(n.data)
	repo := writeRepo(t, parent, "npx-servers", map[string]string{
		".claude-plugin/plugin.json": `{"name": "npx-servers", "version": "1.0.0"}`,
		".mcp.json": `{"mcpServers": {
  "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "${CLAUDE_PLUGIN_DATA}"]},
  "everything": {"command": "npx", "args": ["--yes", "-p", "@modelcontextprotocol/server-everything@2026.8.31", "mcp-server-everything", "stdio"]},
  "thinking": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-sequential-thinking@latest"]}
}}`,
	})
	out, err := n.oz(append([]string{"plugin", "install", repo, "--by", "e2e"}, registryAllowFlags(t)...)...)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	d, _ := datadir.New(n.data)
	in, err := installed.Lookup(d, "npx-servers")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Launchers) != 3 {
		t.Fatalf("install recorded %d launchers, want 3: %+v", len(in.Launchers), in.Launchers)
	}
	for _, l := range in.Launchers {
		if l.Version == "" || !strings.HasPrefix(l.Integrity, "sha512-") || !strings.HasPrefix(l.Entry, installed.LaunchDir+"/"+l.Server+"/node_modules/") {
			t.Errorf("launcher of %s not pinned: %+v", l.Server, l)
		}
		if _, err := os.Stat(filepath.Join(in.Dir, l.Entry)); err != nil {
			t.Errorf("entry of %s not installed: %v", l.Server, err)
		}
	}
	if l := in.Launch("filesystem"); l == nil || l.Version != "2026.8.31" || l.Command != "mcp-server-filesystem" {
		t.Errorf("filesystem launcher: %+v", l)
	}
	if l := in.Launch("thinking"); l == nil || l.Asked != "@modelcontextprotocol/server-sequential-thinking@latest" {
		t.Errorf("the @latest launcher: %+v", l)
	}
	ledger, _ := installed.ReadLedger(d, "npx-servers")
	if len(ledger) == 0 || ledger[len(ledger)-1].Build == nil || len(ledger[len(ledger)-1].Build.Launchers) != 3 {
		t.Errorf("the ledger does not record the launchers: %+v", ledger)
	}
	show, _ := n.oz("plugin", "show", "npx-servers")
	if !strings.Contains(show, "launcher:      server filesystem: npx @modelcontextprotocol/server-filesystem@2026.8.31 resolved to @modelcontextprotocol/server-filesystem@2026.8.31 (sha512-") {
		t.Errorf("plugin show lacks the resolved launcher:\n%s", show)
	}

	n.start("--backend", backend)
	for _, s := range []string{"filesystem", "everything", "thinking"} {
		n.waitState("npx-servers", s, api.StateRunning)
	}
	call := func(tool string, args ...string) string {
		t.Helper()
		out, err := n.oz(append([]string{"call", tool}, args...)...)
		if err != nil {
			t.Fatalf("call %s: %v\n%s", tool, err, out)
		}
		return out
	}
	if out := call("npx-servers__echo", "--arg", "message=hello-from-npx"); !strings.Contains(out, "hello-from-npx") {
		t.Errorf("everything echo: %q", out)
	}
	if out := call("npx-servers__write_file", "--arg", "path="+d.Home("npx-servers")+"/note.txt", "--arg", "content=kept"); strings.Contains(strings.ToLower(out), "error") {
		t.Errorf("filesystem write in its data folder: %q", out)
	}
	if out := call("npx-servers__read_text_file", "--arg", "path="+d.Home("npx-servers")+"/note.txt"); !strings.Contains(out, "kept") {
		t.Errorf("filesystem read: %q", out)
	}
	args, _ := json.Marshal(map[string]any{"thought": "one", "nextThoughtNeeded": false, "thoughtNumber": 1, "totalThoughts": 1})
	if out := call("npx-servers__sequentialthinking", "--json", string(args)); !strings.Contains(out, "thoughtNumber") {
		t.Errorf("sequential thinking: %q", out)
	}
	// Nothing reached out at start: the plugin has no egress, its proxy saw no
	// connection at all, and what runs is the installed entry point, not npx.
	st := n.status()
	for _, p := range st.Plugins {
		if p.Name == "npx-servers" && len(p.Egress) > 0 {
			t.Errorf("the plugin has egress: %+v", p.Egress)
		}
	}
	for _, e := range st.Egress.Recent {
		if e.Plugin == "npx-servers" {
			t.Errorf("the plugin's servers tried the network: %+v", e)
		}
	}
	if ps := processesMentioning(filepath.Join(in.Dir, installed.LaunchDir, "filesystem", "node_modules")); len(ps) == 0 {
		t.Error("no process runs the installed filesystem server")
	}

	// A launcher package that needs its install script is refused under strict,
	// by name, with the exemption that would allow it; nothing is installed.
	repo2 := writeRepo(t, parent, "npx-scripts", map[string]string{
		"plugin.json": `{"name": "npx-scripts", "version": "1.0.0"}`,
		".mcp.json":   `{"mcpServers": {"bundler": {"command": "npx", "args": ["-y", "esbuild@0.25.0", "--version"]}}}`,
	})
	out, err = n.oz(append([]string{"plugin", "install", repo2, "--by", "e2e"}, registryAllowFlags(t)...)...)
	if err == nil || !strings.Contains(out, "npm package esbuild@0.25.0") || !strings.Contains(out, "install script") || !strings.Contains(out, "--plugin-sandbox-exempt npx-scripts@") {
		t.Errorf("a launcher package with an install script: err %v\n%s", err, out)
	}
	if _, err := installed.Lookup(d, "npx-scripts"); err == nil {
		t.Error("the refused plugin is installed")
	}
	// Under the operator's exemption the build rules for package code apply: npm
	// runs the package's scripts, as the node's user, and the result is pinned.
	out, err = n.oz(append([]string{"plugin", "install", repo2, "--by", "e2e", "--plugin-sandbox-exempt", "npx-scripts"}, registryAllowFlags(t)...)...)
	if err != nil || !strings.Contains(out, "with lifecycle scripts (package code ran as the node's user)") || !strings.Contains(out, "resolved to esbuild@0.25.0") {
		t.Errorf("an exempt launcher package with an install script: err %v\n%s", err, out)
	}
}

// pyWheel writes a pure-Python wheel holding fixtures/server.py as module dist
// with a console script that runs it.
func pyWheel(t *testing.T, dir, dist, version, script string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "server.py"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, dist+"-"+version+"-py3-none-any.whl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	info := dist + "-" + version + ".dist-info/"
	for name, body := range map[string]string{
		dist + ".py":              string(src),
		info + "METADATA":         "Metadata-Version: 2.1\nName: " + dist + "\nVersion: " + version + "\n",
		info + "WHEEL":            "Wheel-Version: 1.0\nGenerator: oz0-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		info + "entry_points.txt": "[console_scripts]\n" + script + " = " + dist + ":main\n",
		info + "RECORD":           "",
	} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// A plugin whose server says `uvx --from PKG==V CMD …` (and one `pipx run PKG`) is
// resolved at install from the operator's wheel index (served on loopback here):
// the wheel is unpacked, the version and the wheel's sha256 pinned, and the server
// starts the console script with the managed Python under strict, with no egress,
// serving its tools through the gateway. A missing package is an install error
// that says wheels only.
func TestE2EUVXServersResolvedFromWheelIndex(t *testing.T) {
	backend := backendsForE2E(t)[0]
	n := newE2E(t, nil)
	n.stop()
	parent := filepath.Dir(n.data)
	files := filepath.Join(parent, "wheels")
	os.MkdirAll(files, 0o755)
	whl := pyWheel(t, files, "oz0_echo", "1.2.0", "oz0-echo")
	pyWheel(t, files, "oz0_echo", "1.3.0", "oz0-echo")
	pyWheel(t, files, "oz0_adder", "0.9", "oz0-adder")
	pyWheel(t, files, "oz0_adder", "1.0", "oz0-adder")
	body, _ := os.ReadFile(whl)
	sum := sha256.Sum256(body)
	var mu sync.Mutex
	adderIndex := `<a href="/files/oz0_adder-0.9-py3-none-any.whl">a</a> <a href="/files/oz0_adder-1.0-py3-none-any.whl">b</a>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/oz0-echo/":
			fmt.Fprintf(w, `<a href="/files/oz0_echo-1.2.0-py3-none-any.whl#sha256=%s">a</a> <a href="/files/oz0_echo-1.3.0-py3-none-any.whl">b</a>`, hex.EncodeToString(sum[:]))
			return
		case "/simple/oz0-adder/":
			mu.Lock()
			fmt.Fprint(w, adderIndex)
			mu.Unlock()
			return
		}
		if p, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok {
			http.ServeFile(w, r, filepath.Join(files, filepath.Base(p)))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	repo := writeRepo(t, parent, "uvx-servers", map[string]string{
		"plugin.json": `{"name": "uvx-servers", "version": "1.0.0"}`,
		".mcp.json": `{"mcpServers": {
  "pinned": {"command": "uvx", "args": ["--from", "oz0-echo==1.2.0", "oz0-echo", "--tools", "echo"]},
  "newest": {"command": "pipx", "args": ["run", "oz0-adder", "--tools", "add"]}
}}`,
	})
	out, err := n.oz("plugin", "install", repo, "--by", "e2e")
	if err == nil || !strings.Contains(out, "python dependency oz0-") || !strings.Contains(out, "wheels only") {
		t.Errorf("install without an index: err %v\n%s", err, out)
	}
	out, err = n.oz("plugin", "install", repo, "--by", "e2e", "--python-index", srv.URL+"/simple")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	d, _ := datadir.New(n.data)
	in, err := installed.Lookup(d, "uvx-servers")
	if err != nil {
		t.Fatal(err)
	}
	l := in.Launch("pinned")
	if l == nil || l.Version != "1.2.0" || l.Entry != "oz0_echo:main" || !strings.HasPrefix(l.Integrity, "sha256-"+hex.EncodeToString(sum[:])) {
		t.Fatalf("pinned launcher: %+v", l)
	}
	if l := in.Launch("newest"); l == nil || l.Version != "1.0" || l.Launcher != "pipx" {
		t.Errorf("a launcher with no version pins the newest wheel: %+v", l)
	}
	n.start("--backend", backend)
	n.waitState("uvx-servers", "pinned", api.StateRunning)
	n.waitState("uvx-servers", "newest", api.StateRunning)
	if out, err := n.oz("call", "uvx-servers__echo", "--arg", "text=from-a-wheel"); err != nil || !strings.Contains(out, "from-a-wheel") {
		t.Errorf("echo through the gateway: %v %q", err, out)
	}
	if out, err := n.oz("call", "uvx-servers__add", "--arg", "a=2", "--arg", "b=3"); err != nil || !strings.Contains(out, "5") {
		t.Errorf("add through the gateway: %v %q", err, out)
	}

	// A newer wheel on the index does not move the pin: installing again changes
	// nothing; `plugin update` re-resolves, says what changed, and the running node
	// restarts the server on the new package.
	pyWheel(t, files, "oz0_adder", "1.1", "oz0-adder")
	mu.Lock()
	adderIndex = `<a href="/files/oz0_adder-1.0-py3-none-any.whl">b</a> <a href="/files/oz0_adder-1.1-py3-none-any.whl">c</a>`
	mu.Unlock()
	n.waitState("uvx-servers", "newest", api.StateRunning)
	// The server's processes, told apart by the console script its bootstrap names.
	adders := func() map[string]bool {
		out := map[string]bool{}
		for _, p := range processesMentioning(`sys.argv[0] = "oz0-adder"`) {
			out[strings.SplitN(p, ":", 2)[0]] = true
		}
		return out
	}
	before := adders()
	if len(before) == 0 {
		t.Fatal("no process runs the oz0-adder console script")
	}
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e", "--python-index", srv.URL+"/simple"); err != nil || !strings.Contains(out, "nothing changed") {
		t.Errorf("install again: %v\n%s", err, out)
	}
	if in, _ := installed.Lookup(d, "uvx-servers"); in.Launch("newest").Version != "1.0" {
		t.Errorf("the pin moved without an update: %+v", in.Launch("newest"))
	}
	out, err = n.oz("plugin", "update", "uvx-servers", "--by", "e2e", "--python-index", srv.URL+"/simple")
	if err != nil || !strings.Contains(out, "commit unchanged") || !strings.Contains(out, "server newest: oz0-adder@1.0 -> oz0-adder@1.1") || !strings.Contains(out, "server pinned: oz0-echo@1.2.0 unchanged") {
		t.Fatalf("update: %v\n%s", err, out)
	}
	if in, _ := installed.Lookup(d, "uvx-servers"); in.Launch("newest").Version != "1.1" {
		t.Errorf("the update did not pin 1.1: %+v", in.Launch("newest"))
	}
	if _, err := os.Stat(filepath.Join(d.PluginCommit("uvx-servers", in.Commit), installed.SitePackages, "oz0_adder-1.1.dist-info")); err != nil {
		t.Errorf("the updated package is not installed: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, fresh := adders(), true
		for pid := range now {
			fresh = fresh && !before[pid]
		}
		if len(now) > 0 && fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server was not restarted on the updated package: processes %v, before %v", now, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.waitState("uvx-servers", "newest", api.StateRunning)
	if out, err := n.oz("call", "uvx-servers__add", "--arg", "a=4", "--arg", "b=3"); err != nil || !strings.Contains(out, "7") {
		t.Errorf("add after the update: %v %q", err, out)
	}
}

// A server that keeps crashing in its sandbox explains itself: its crash-loop
// finding names what its stderr shows (a write into its read-only plugin folder,
// a command the sandbox's root does not have) and the egress the proxy refused it.
// A server whose program is on no folder of its PATH at all is not started into a
// crash loop: it is held back with a runtime-missing finding.
func TestE2ECrashLoopExplainsItself(t *testing.T) {
	backend := backendsForE2E(t)[0]
	n := newE2E(t, nil)
	n.stop()
	repo := writeRepo(t, filepath.Dir(n.data), "crashers", map[string]string{
		"plugin.json": `{"name": "crashers", "version": "1.0.0"}`,
		".mcp.json": `{"mcpServers": {
  "writer": {"command": "/bin/sh", "args": ["-c", "touch /usr/oz0-cache.db"]},
  "browser": {"command": "/bin/sh", "args": ["-c", "echo 'Error: Could not find Chrome (ver. 131.0.6778.85). This can occur if either' >&2; exit 1"]},
  "missing": {"command": "rg", "args": ["--files"]},
  "absent": {"command": "/opt/oz0-e2e-absent/bin/rg", "args": ["--files"]},
  "fetcher": {"command": "python3", "args": ["-c", "import urllib.request; urllib.request.urlopen('https://pkgs.example.com/simple/', timeout=10)"]}
}}`,
	})
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	n.start("--backend", backend)
	want := map[string]string{
		"crashers/writer":  "it wrote to a read-only place",
		"crashers/browser": "it looked for a browser (Chrome, Chromium) and found none: the host's /opt and browser folders are not in the sandbox; the operator can show one read-only: --plugin-ro-path crashers=/opt/google/chrome",
		"crashers/absent":  "command /opt/oz0-e2e-absent/bin/rg was not found in its sandbox: the sandbox's root is an allowlist",
		"crashers/fetcher": "egress refused pkgs.example.com:443 by the plugin's manifest and the tenant list",
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		for _, f := range n.status().Findings {
			if w, ok := want[f.Subject]; ok && f.Code == api.CodeCrashLoop {
				if !strings.Contains(f.Message, w) {
					t.Errorf("crash loop of %s: %q, want it to say %q", f.Subject, f.Message, w)
				}
				delete(want, f.Subject)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	for s := range want {
		t.Errorf("no crash-loop finding for %s", s)
	}
	if _, err := exec.LookPath("rg"); err == nil {
		t.Log("rg is installed here: a server whose program is missing is not tested")
		return
	}
	held := false
	for _, f := range n.status().Findings {
		if f.Subject == "crashers/missing" {
			held = held || f.Code == api.CodeRuntimeMissing && strings.Contains(f.Message, "starts rg, which is not installed")
			if f.Code == api.CodeCrashLoop {
				t.Errorf("a server whose program is missing crash-loops: %+v", f)
			}
		}
	}
	if !held {
		t.Errorf("no runtime-missing finding for crashers/missing: %+v", n.status().Findings)
	}
}
