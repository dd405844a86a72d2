package install

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// The launcher lines published plugins use are read into a package, a version and
// the arguments that stay with the server; anything not from a registry, or an
// option whose meaning is unknown, is an install-time error naming it.
func TestParseLauncher(t *testing.T) {
	for _, tc := range []struct {
		cmd      string
		args     []string
		ok       bool
		pkg      string
		spec     string
		command  string
		skip     int
		errorHas string
	}{
		{cmd: "node", args: []string{"server.js"}},
		{cmd: "/usr/bin/npx", args: []string{"-y", "x"}}, // a path is not the launcher
		{cmd: "pipx", args: []string{"install", "x"}},
		{cmd: "npx", args: []string{"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/tmp"}, ok: true, pkg: "@modelcontextprotocol/server-filesystem", spec: "2026.8.31", skip: 2},
		{cmd: "npx", args: []string{"--yes", "pkg@latest"}, ok: true, pkg: "pkg", skip: 2},
		{cmd: "npx", args: []string{"pkg", "--flag"}, ok: true, pkg: "pkg", skip: 1},
		{cmd: "npx", args: []string{"-y", "pkg@^1.2"}, ok: true, pkg: "pkg", spec: "^1.2", skip: 2},
		{cmd: "npx", args: []string{"-y", "-p", "@s/p@1.0.0", "p-bin", "stdio"}, ok: true, pkg: "@s/p", spec: "1.0.0", command: "p-bin", skip: 4},
		{cmd: "npx", args: []string{"--package=@s/p", "p-bin"}, ok: true, pkg: "@s/p", command: "p-bin", skip: 2},
		{cmd: "npx", args: []string{"-y", "--", "pkg", "-y"}, ok: true, pkg: "pkg", skip: 3},
		{cmd: "bunx", args: []string{"--bun", "pkg@2"}, ok: true, pkg: "pkg", spec: "2", skip: 2},
		{cmd: "npx", args: []string{"-y", "github:owner/repo"}, ok: true, errorHas: "not a package of the registry"},
		{cmd: "npx", args: []string{"-y", "owner/repo"}, ok: true, errorHas: "not a package of the registry"},
		{cmd: "npx", args: []string{"-y", "https://example.invalid/x.tgz"}, ok: true, errorHas: "not a package of the registry"},
		{cmd: "npx", args: []string{"-y", "./local"}, ok: true, errorHas: "not a package of the registry"},
		{cmd: "npx", args: []string{"-y", "pkg@file:../x"}, ok: true, errorHas: "not a package of the registry"},
		{cmd: "npx", args: []string{"--registry", "x", "pkg"}, ok: true, errorHas: "option --registry is not understood"},
		{cmd: "npx", args: []string{"-y"}, ok: true, errorHas: "no package named"},
		{cmd: "npx", args: []string{"-y", "${PKG}"}, ok: true, errorHas: "not an npm package name"},
		{cmd: "uvx", args: []string{"mcp-server-fetch"}, ok: true, pkg: "mcp-server-fetch", command: "mcp-server-fetch", skip: 1},
		{cmd: "uvx", args: []string{"mcp-server-fetch@1.2.0", "--x"}, ok: true, pkg: "mcp-server-fetch", spec: "==1.2.0", command: "mcp-server-fetch", skip: 1},
		{cmd: "uvx", args: []string{"Tool_Name@latest"}, ok: true, pkg: "tool-name", command: "Tool_Name", skip: 1},
		{cmd: "uvx", args: []string{"--from", "pkg>=2", "pkg-cli", "serve"}, ok: true, pkg: "pkg", spec: ">=2", command: "pkg-cli", skip: 3},
		{cmd: "uvx", args: []string{"--from", "git+https://example.invalid/x", "x"}, ok: true, errorHas: "not a package of the index"},
		{cmd: "uvx", args: []string{"--with", "y", "x"}, ok: true, errorHas: "option --with is not understood"},
		{cmd: "uvx", args: []string{"--python", "3.12", "browser-use@latest", "--cli-mcp"}, ok: true, pkg: "browser-use", command: "browser-use", skip: 3},
		{cmd: "uvx", args: []string{"--env-file", "${CLAUDE_PLUGIN_ROOT}/.env", "zs-mcp@0.15.4"}, ok: true, pkg: "zs-mcp", spec: "==0.15.4", command: "zs-mcp", skip: 3},
		{cmd: "uvx", args: []string{"-p", "3.11", "--env-file=.env", "x"}, ok: true, pkg: "x", command: "x", skip: 4},
		{cmd: "uvx", args: []string{"--env-file"}, ok: true, errorHas: "--env-file needs a file"},
		{cmd: "pipx", args: []string{"run", "--env-file", ".env", "x"}, ok: true, errorHas: "option --env-file is not understood"},
		{cmd: "pipx", args: []string{"run", "pkg"}, ok: true, pkg: "pkg", command: "pkg", skip: 2},
		{cmd: "pipx", args: []string{"run", "--spec", "pkg==1.0", "pkg-cli", "a"}, ok: true, pkg: "pkg", spec: "==1.0", command: "pkg-cli", skip: 4},
	} {
		c, ok, err := parseLauncher(tc.cmd, tc.args)
		name := tc.cmd + " " + strings.Join(tc.args, " ")
		if ok != tc.ok {
			t.Errorf("%s: launcher %v, want %v", name, ok, tc.ok)
			continue
		}
		if tc.errorHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
				t.Errorf("%s: error %v, want one saying %q", name, err, tc.errorHas)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if ok && (c.pkg != tc.pkg || c.spec != tc.spec || c.command != tc.command || c.skip != tc.skip) {
			t.Errorf("%s: got pkg %q spec %q command %q skip %d, want %q %q %q %d", name, c.pkg, c.spec, c.command, c.skip, tc.pkg, tc.spec, tc.command, tc.skip)
		}
	}
}

// uvx --python is checked against the managed Python's version: a version or
// its prefix, python/cpython forms, and specifiers; a path or another
// implementation cannot be judged.
func TestPythonVersionHolds(t *testing.T) {
	for _, tc := range []struct {
		req, have   string
		holds, okay bool
	}{
		{"3.11", "3.11", true, true},
		{"3.11.4", "3.11", true, true},
		{"3", "3.11", true, true},
		{"3.12", "3.11", false, true},
		{"python3.11", "3.11", true, true},
		{"cpython@3.12", "3.11", false, true},
		{">=3.10,<3.13", "3.11", true, true},
		{">=3.12", "3.11", false, true},
		{"/usr/bin/python3", "3.11", false, false},
		{"pypy3.10", "3.11", false, false},
		{"3.11a", "3.11", false, false},
	} {
		if holds, ok := pythonVersionHolds(tc.req, tc.have); holds != tc.holds || ok != tc.okay {
			t.Errorf("%s on %s: holds %v known %v, want %v %v", tc.req, tc.have, holds, ok, tc.holds, tc.okay)
		}
	}
}

// A plugin may not ship the folder launcher packages are installed into: its
// contents would otherwise stand in for the resolved package (npm ci on a tree
// with its own files there, or a bin the record points at).
func TestLauncherFolderShippedIsRefused(t *testing.T) {
	d := newData(t)
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json": pluginJSON("ships-launch"),
		".mcp.json":   `{"mcpServers": {"s": {"command": "npx", "args": ["-y", "pkg@1.0.0"]}}}`,
		installed.LaunchDir + "/s/node_modules/pkg/package.json": `{"name": "pkg", "version": "1.0.0", "bin": "evil.js"}`,
		installed.LaunchDir + "/s/node_modules/pkg/evil.js":      "process.exit(0)\n",
	})
	installErr(t, d, Options{Source: repo, Log: quiet()}, "the plugin ships "+installed.LaunchDir)
	stagingEmpty(t, d)
	// A launcher line the node cannot resolve at install refuses the install,
	// naming the server and what was not understood.
	repo2, _ := newRepo(t, "", map[string]string{
		"plugin.json": pluginJSON("git-launch"),
		".mcp.json":   `{"mcpServers": {"s": {"command": "npx", "args": ["-y", "github:owner/repo"]}}}`,
	})
	installErr(t, d, Options{Source: repo2, Log: quiet()}, "server s starts through a launcher the node resolves at install")
}

// A launcher the node cannot resolve at install (a git source, as in `uvx --from
// git+https://… serena …`) refuses the install under strict, naming why and the
// exemption; exempt, the plugin installs with a note saying its server runs as
// published, and no package is pinned for it.
func TestUnresolvableLauncherNeedsAnExemption(t *testing.T) {
	d := newData(t)
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json": pluginJSON("git-launch"),
		".mcp.json":   `{"mcpServers": {"s": {"command": "uvx", "args": ["--from", "git+https://example.invalid/x", "x", "serve"]}}}`,
	})
	installErr(t, d, Options{Source: repo, Log: quiet()}, "a launcher the node cannot resolve runs only as published (fetching its package at every start, unpinned, with the egress that needs); under --plugin-sandbox strict that needs an operator exemption: --plugin-sandbox-exempt git-launch@")
	stagingEmpty(t, d)
	in := mustInstall(t, d, Options{Source: repo, Exemptions: []policy.Exemption{{Name: "git-launch"}}})
	if in.Launch("s") != nil || !slices.ContainsFunc(in.Notes, func(n string) bool {
		return strings.Contains(n, "server s is not resolved at install") && strings.Contains(n, "not a package of the index") && strings.Contains(n, "runs as published")
	}) {
		t.Errorf("exempt install: launch %+v, notes %q", in.Launch("s"), in.Notes)
	}
}

// The bin a launcher runs is a regular file inside the package's own folder: a
// bin naming a path out of it, or a link, is refused.
func TestLauncherBinStaysInThePackage(t *testing.T) {
	tree := t.TempDir()
	pkg := filepath.Join(tree, installed.LaunchDir, "s", "node_modules", "p")
	os.MkdirAll(pkg, 0o755)
	b := &builder{tree: tree, plugin: "x", commit: "c"}
	c := launcherCall{launcher: "npx", pkg: "p"}
	rel := installed.LaunchDir + "/s/node_modules/p"
	for _, tc := range []struct {
		bin, want string
	}{
		{`"../../../../../../etc/passwd"`, "lies outside the package"},
		{`{"p": "../q/index.js"}`, "lies outside the package"},
		{`"link.js"`, "is not a file of the package"},
		{`{"a": "a.js", "b": "b.js"}`, `has no bin "p" (it has a, b)`},
		{`null`, "has no bin to run"},
	} {
		os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name": "p", "bin": `+tc.bin+`}`), 0o644)
		os.Symlink("/etc/passwd", filepath.Join(pkg, "link.js"))
		if _, _, err := b.npmBin(rel, c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bin %s: %v, want %q", tc.bin, err, tc.want)
		}
	}
	os.WriteFile(filepath.Join(pkg, "index.js"), []byte("//\n"), 0o644)
	os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name": "p", "bin": {"p": "./index.js", "other": "index.js"}}`), 0o644)
	if name, entry, err := b.npmBin(rel, c); err != nil || name != "p" || entry != rel+"/index.js" {
		t.Errorf("bin named like the package: %q %q %v", name, entry, err)
	}
}

// A launcher package whose tree has a package with an install script is refused
// under strict before anything is fetched, naming the package, who needs it and
// the exemption.
func TestLauncherInstallScriptsRefused(t *testing.T) {
	tree := t.TempDir()
	lock := `{"lockfileVersion": 3, "packages": {
  "": {"dependencies": {"srv": "1.0.0"}},
  "node_modules/srv": {"version": "1.0.0", "resolved": "https://registry.example/srv/-/srv-1.0.0.tgz"},
  "node_modules/native": {"version": "2.0.0", "hasInstallScript": true},
  "node_modules/devtool": {"version": "1.0.0", "dev": true, "hasInstallScript": true}
}}`
	os.WriteFile(filepath.Join(tree, "package-lock.json"), []byte(lock), 0o644)
	b := &builder{tree: tree, plugin: "x", commit: "abc"}
	err := b.checkNoInstallScripts("package-lock.json", &launcherCall{launcher: "npx", pkg: "srv"})
	if err == nil || !errors.Is(err, ErrBuildRefused) || !strings.Contains(err.Error(), "npm package native@2.0.0 (a dependency of srv)") || !strings.Contains(err.Error(), "--plugin-sandbox-exempt x@abc") {
		t.Errorf("install script in the tree: %v", err)
	}
	os.WriteFile(filepath.Join(tree, "package-lock.json"), []byte(strings.Replace(lock, `"hasInstallScript": true}`, `"hasInstallScript": false}`, 1)), 0o644)
	if err := b.checkNoInstallScripts("package-lock.json", &launcherCall{launcher: "npx", pkg: "srv"}); err != nil {
		t.Errorf("no install script (a dev package's does not count): %v", err)
	}
}

// A launcher's runtime comes from the node's managed runtimes (runtimes.json, which
// an operator may edit); one that is missing is an install error naming it, not a
// server that crash-loops later.
func TestLauncherMissingRuntimeIsAnInstallError(t *testing.T) {
	d := newData(t)
	none, _ := json.Marshal(installed.RuntimeSet{})
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Runtimes(), none, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, server, want string
	}{
		{"npx-no-node", `{"command": "npx", "args": ["-y", "pkg@1.0.0"]}`, "starts a server with npx, and no managed Node.js runtime with npm was found"},
		{"bunx-no-bun", `{"command": "bunx", "args": ["pkg@1.0.0"]}`, "bunx needs the Bun runtime, and no managed Bun runtime was found"},
		{"uvx-no-python", `{"command": "uvx", "args": ["pkg"]}`, "starts a server with uvx, and no managed Python runtime was found"},
	} {
		repo, _ := newRepo(t, "", map[string]string{
			"plugin.json": pluginJSON(tc.name),
			".mcp.json":   `{"mcpServers": {"s": ` + tc.server + `}}`,
		})
		installErr(t, d, Options{Source: repo, Log: quiet()}, tc.want)
	}
}
