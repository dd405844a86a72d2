package backenddarwin

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Fixed host layout for golden files: a user node on a Mac. The paths are macOS
// paths; nothing below is read from this machine except the fixture manifests.
const (
	goldenData = "/Users/dev/Library/Application Support/oz0-node"
	goldenPort = 41873
)

// errNoTarget marks a fixture with neither servers nor hooks (build-only fixtures).
var errNoTarget = errors.New("has no server or hook, so no sandbox to render")

// fixtureSpec builds the Spec of a fixture plugin's first server (or first hook when
// it has no servers) exactly as the node would on macOS in strict mode.
func fixtureSpec(t testing.TB, name string, edit func(*sandbox.Host)) *sandbox.Spec {
	t.Helper()
	s, err := fixtureSpecWith(t, name, edit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fixtureSpecErr(t testing.TB, name string) (*sandbox.Spec, error) {
	return fixtureSpecWith(t, name, nil)
}

func fixtureSpecWith(t testing.TB, name string, edit func(*sandbox.Host)) (*sandbox.Spec, error) {
	t.Helper()
	dir, err := fixtures.Extract(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Load(dir, manifest.Options{})
	if err != nil {
		t.Fatalf("load fixture %s: %v", name, err)
	}
	commit := "0123456789abcdef0123456789abcdef01234567"
	h := sandbox.Host{
		OS:         "darwin",
		DataDir:    goldenData,
		KeyFile:    goldenData + "/node.key",
		PluginDir:  filepath.Join(goldenData, "plugins", m.Name, commit),
		Home:       filepath.Join(goldenData, "homes", m.Name),
		Others:     []string{goldenData + "/homes/other-plugin", goldenData + "/plugins/other-plugin"},
		Runtimes:   []string{"/opt/homebrew/opt/python@3.12", goldenData + "/runtimes/node-22"},
		NodeBinary: "/usr/local/bin/oz0-node",
		ProxyPort:  goldenPort,
	}
	if edit != nil {
		edit(&h)
	}
	m = m.Expand(manifest.Vars{Root: h.PluginDir, Data: h.Home})
	d := policy.Decide(policy.Inputs{Manifest: m, Commit: commit, Mode: policy.Strict, OS: "darwin", Tier: 1, Backend: policy.BackendSeatbelt})
	var (
		t0   policy.Target
		kind string
		argv []string
		cwd  string
		env  map[string]string
		lim  manifest.Limits
	)
	switch {
	case len(m.Servers) > 0 && m.Servers[0].IsRemote():
		// A remote server runs no plugin code and has no sandbox.
		return nil, fmt.Errorf("fixture %s: remote server: %w", name, errNoTarget)
	case len(m.Servers) > 0:
		s := m.Servers[0]
		t0, _ = d.Server(s.Name)
		kind, argv, cwd, env, lim = "server", append([]string{s.Command}, s.Args...), s.Cwd, s.Env, s.Limits
	case len(m.Hooks) > 0:
		t0, kind, argv = d.Hooks[0], "hook", []string{"/bin/sh", "-c", m.Hooks[0].Command}
	default:
		return nil, fmt.Errorf("fixture %s: %w", name, errNoTarget)
	}
	return sandbox.Build(&d, t0, m, kind, argv, cwd, env, h, lim)
}
