package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	backenddarwin "oz0.ai/node/backend_darwin"
	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// The build sandbox's spec is one Seatbelt can express on a Mac (the profile
// renderer is pure and runs here): the staging folder holding the plugin's files
// writable, npm's folder readable, the node key denied, the proxy a loopback port.
func TestBuildSpecRendersAsASeatbeltProfile(t *testing.T) {
	d, err := datadir.New("/Users/dev/Library/Application Support/oz0-node")
	if err != nil {
		t.Fatal(err)
	}
	st := d.Staging() + "/0123456789abcdef"
	b := &builder{d: d, tree: st + "/tree", staging: st, plugin: "weather", commit: "c",
		nodePath: "/opt/homebrew/Cellar/node/22.1.0/bin/node", npmPath: "/opt/homebrew/bin/npm"}
	s := b.buildSpec(buildSpecIn{
		backend: policy.BackendSeatbelt, argv: []string{"/opt/homebrew/bin/npm", "ci", "--ignore-scripts"},
		home: st + "/build-home", uid: 501, gid: 20, hostPort: 40123,
		runtimes: []string{"/opt/homebrew/Cellar/node/22.1.0/bin/node"},
	})
	p, err := backenddarwin.RenderProfile(s)
	if err != nil {
		t.Fatalf("the build spec is not a Seatbelt profile: %v", err)
	}
	params := map[string]bool{}
	for _, prm := range p.Params {
		params[prm.Value] = true
	}
	for _, want := range []string{st, d.Key(), "/opt/homebrew/bin"} {
		if !params[want] {
			t.Errorf("profile parameters lack %s: %v", want, p.Params)
		}
	}
	if !strings.Contains(p.Text, "40123") && !params["localhost:40123"] {
		t.Errorf("profile does not limit the network to the proxy port 40123:\n%s", p.Text)
	}
}

// On the Landlock tier the build sandbox is the Linux one without its network
// namespace: the plugin tree and the build's home writable at their own paths,
// and the proxy a loopback port of the host, the one port it may connect to.
func TestBuildSpecOnTheLandlockTier(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	st := filepath.Join(d.Staging(), "0123456789abcdef")
	for _, p := range []string{st + "/tree", st + "/build-home"} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	b := &builder{d: d, tree: st + "/tree", staging: st, plugin: "weather", commit: "c",
		nodePath: "/usr/bin/node", npmPath: "/usr/bin/npm"}
	s := b.buildSpec(buildSpecIn{
		backend: policy.BackendLandlock, argv: []string{"/usr/bin/npm", "ci", "--ignore-scripts"},
		home: st + "/build-home", uid: 1900000001, gid: 1900000001, perPlugin: true, root: true, hostPort: 40123,
		hostCred: "0123456789abcdef0123456789abcdef",
	})
	if s.Proxy == nil || s.Proxy.Port != 40123 || s.Proxy.SocketDir != "" || s.Bridge != "" {
		t.Errorf("the proxy is not the host port alone: %+v, bridge %q", s.Proxy, s.Bridge)
	}
	if !slices.Contains(s.Env, "HTTPS_PROXY=http://oz0:0123456789abcdef0123456789abcdef@127.0.0.1:40123") {
		t.Errorf("the proxy variables do not name the host port: %q", s.Env)
	}
	out, err := backendlinux.Render(policy.BackendLandlock, s)
	if err != nil {
		t.Fatalf("the build spec is not a Landlock sandbox: %v", err)
	}
	for _, want := range []string{"write " + st + "/tree\n", "write " + st + "/build-home\n", "TCP connect to port 40123 only"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, sandbox.InnerProxyDir) {
		t.Errorf("a Landlock build binds the proxy's socket folder:\n%s", out)
	}
}
