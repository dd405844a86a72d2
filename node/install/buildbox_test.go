package install

import (
	"strings"
	"testing"

	backenddarwin "oz0.ai/node/backend_darwin"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
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
