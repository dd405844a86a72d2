package main

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/netrule"
	"oz0.ai/node/node/policy"
)

// registryAllowFlags opens, for `plugin install`, the addresses the package
// registry resolves to on this machine where the proxy's address guard would
// refuse them (a test machine may reach the registry through a local mirror).
func registryAllowFlags(t *testing.T) []string {
	t.Helper()
	d, err := datadir.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := install.NPMRegistry(context.Background(), d)
	if err != nil {
		t.Skipf("no npm here (%v): the registry's addresses are not opened", err)
	}
	u, err := url.Parse(reg)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := net.DefaultResolver.LookupNetIP(context.Background(), "ip", u.Hostname())
	var out []string
	for _, a := range addrs {
		if a = a.Unmap(); netrule.Forbidden(a) {
			out = append(out, "--egress-allow-cidr", netip.PrefixFrom(a, a.BitLen()).String())
		}
	}
	return out
}

// `plugin install` builds npm dependencies in the build sandbox (as the plugin's
// user on a root node) and says so; a plugin whose node_modules is a chain of links
// out of it is refused by name and nothing outside changes.
func TestE2EPluginInstallBuildsInTheSandbox(t *testing.T) {
	works := false
	for _, b := range backendsForE2E(t) {
		works = works || b == policy.BackendBwrap
	}
	if !works {
		t.Skip("not tested: bwrap does not work here")
	}
	if _, err := os.Stat("/usr/bin/npm"); err != nil {
		t.Skip("not tested: no npm at /usr/bin/npm (CI installs it)")
	}
	n := newE2E(t, nil)
	n.stop()
	parent := filepath.Dir(n.data)
	// A server that runs Node.js, so that the plugin's package.json is built.
	repo := filepath.Join(parent, "repos", "npm-postinstall-marker")
	if _, err := fixtures.Extract("npm-postinstall-marker", repo); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, ".mcp.json"), []byte(`{"mcpServers": {"main": {"command": "node", "args": ["${CLAUDE_PLUGIN_ROOT}/index.js"]}}}`), 0o644)
	commitRepo(t, repo)
	out, err := n.oz("plugin", "install", repo, "--by", "e2e")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	want := "in a bwrap build sandbox as the node's user"
	if os.Geteuid() == 0 {
		want = "in a bwrap build sandbox as the plugin's user"
	}
	if !strings.Contains(out, want) {
		t.Fatalf("install output does not say %q:\n%s", want, out)
	}

	// node_modules → d1/…/d12/up/../../../../../outside, where up points back at
	// the root: inside as text, four folders above the staging tree once followed.
	outside := filepath.Join(parent, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "precious"), []byte("keep\n"), 0o644)
	evil := filepath.Join(parent, "repos", "npm-chain")
	if _, err := fixtures.Extract("npm-postinstall-marker", evil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(evil, "plugin.json"), []byte(`{"name":"npm-chain","version":"1.0.0"}`), 0o644)
	deep := "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12"
	os.MkdirAll(filepath.Join(evil, deep), 0o755)
	os.WriteFile(filepath.Join(evil, deep, "keep"), nil, 0o644)
	os.Symlink(strings.Repeat("../", 11)+"..", filepath.Join(evil, deep, "up"))
	os.Symlink(deep+"/up/../../../../outside", filepath.Join(evil, "node_modules"))
	commitRepo(t, evil)
	out, err = n.oz("plugin", "install", evil, "--by", "e2e")
	if err == nil || !strings.Contains(out, "node_modules is a symlink") {
		t.Fatalf("a node_modules chain out of the plugin: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "keep\n" {
		t.Fatalf("the folder outside changed: %q %v", b, err)
	}
}
