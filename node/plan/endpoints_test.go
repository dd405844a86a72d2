package plan

import (
	"fmt"
	"testing"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// A plugin gets an endpoint of its own (its hooks') and one per server; a port on
// the host's loopback, which every local process can reach, only where a sandbox
// has no other way to the proxy: auto on Linux, Seatbelt. Under strict on Linux,
// and for what runs unsandboxed, none. The socket's group is the plugin user's.
func TestEndpointsOpenHostPortsOnlyWhereNeeded(t *testing.T) {
	m := &manifest.Manifest{
		Name: "demo",
		Servers: []manifest.Server{
			{Name: "a", Command: "a", Sandbox: manifest.SandboxDefault},
			{Name: "b", Command: "b", Sandbox: manifest.SandboxDefault},
			{Name: "health", Command: "h", Sandbox: manifest.SandboxHost},
		},
		Hooks: []manifest.Hook{{Event: "PreToolUse", Command: "x"}},
	}
	for _, c := range []struct {
		name     string
		in       policy.Inputs
		hostPort bool // for the plugin's own and servers a and b
		perUser  bool
	}{
		{"strict on a root Linux node", policy.Inputs{Mode: policy.Strict, OS: "linux", Tier: 1, Backend: policy.BackendBwrap, Root: true, DataDirTraversable: true}, false, true},
		{"strict under gVisor", policy.Inputs{Mode: policy.Strict, OS: "linux", Tier: 1, Backend: policy.BackendGVisor, GVisor: true, Root: true, DataDirTraversable: true}, false, true},
		{"strict on a user's Linux node", policy.Inputs{Mode: policy.Strict, OS: "linux", Tier: 1, Backend: policy.BackendBwrap}, false, false},
		{"auto on Linux", policy.Inputs{Mode: policy.Auto, OS: "linux", Tier: 1, Backend: policy.BackendBwrap, Root: true, DataDirTraversable: true}, true, true},
		{"a private candidate under auto", policy.Inputs{Mode: policy.Auto, OS: "linux", Tier: 1, Backend: policy.BackendBwrap, Private: true}, false, false},
		{"strict on macOS (Seatbelt)", policy.Inputs{Mode: policy.Strict, OS: "darwin", Tier: 1, Backend: policy.BackendSeatbelt}, true, false},
		{"auto on macOS (unsandboxed)", policy.Inputs{Mode: policy.Auto, OS: "darwin", Tier: 1, Backend: policy.BackendSeatbelt}, false, false},
		{"off", policy.Inputs{Mode: policy.Off, OS: "linux", Tier: 1, Backend: policy.BackendBwrap, Root: true, DataDirTraversable: true}, false, false},
		{"tier 0", policy.Inputs{Mode: policy.Strict, OS: "linux", Tier: 0, Backend: policy.BackendNone}, false, false},
	} {
		in := c.in
		in.Manifest, in.Commit = m, "0123456789abcdef0123456789abcdef01234567"
		p := &Plugin{Manifest: m, Decision: policy.Decide(in), node: &Node{OS: in.OS}}
		got := p.Endpoints()
		var gid uint32
		if c.perUser {
			gid = policy.PluginUID("demo")
		}
		want := []egress.Want{{Server: "", HostPort: c.hostPort, GID: gid}, {Server: "a", HostPort: c.hostPort, GID: gid},
			{Server: "b", HostPort: c.hostPort, GID: gid}, {Server: "health", GID: gid}} // refused: never a port
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: endpoints %+v, want %+v", c.name, got, want)
		}
	}
}
