package sandbox

import (
	"strings"
	"testing"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// A remote server runs no plugin code: nothing gets a spec in its name (an exec
// "in its sandbox" would otherwise run unsandboxed, as its backend is none).
func TestRemoteTargetHasNoSpec(t *testing.T) {
	tg := policy.Target{Kind: "server", Name: "s", Action: policy.Remote, Backend: policy.BackendNone, Network: policy.NetProxy}
	h := Host{OS: "linux", DataDir: "/d", PluginDir: "/d/plugins/p/c", Home: "/d/homes/p"}
	_, err := Build(&policy.Decision{Plugin: "p"}, tg, &manifest.Manifest{Name: "p"}, "exec", []string{"/bin/sh"}, "", nil, h, manifest.Limits{})
	if err == nil || !strings.Contains(err.Error(), "remote") {
		t.Fatalf("Build of a remote target: %v", err)
	}
}
