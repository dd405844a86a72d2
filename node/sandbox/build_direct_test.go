package sandbox

import (
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// A root Linux node's data folder and one plugin in it, as the plan describes
// them to Build.
const (
	tData   = "/var/lib/oz0-node"
	tPlugin = tData + "/plugins/demo/0123456789abcdef0123456789abcdef01234567"
	tHome   = tData + "/homes/demo"
)

func tHost() Host {
	return Host{
		OS: "linux", DataDir: tData, KeyFile: tData + "/node.key",
		PluginDir: tPlugin, Home: tHome,
		Others:     []string{tData + "/plugins/zeta", tData + "/homes/alpha", tData + "/homes/zeta", tData + "/plugins/alpha"},
		Runtimes:   []string{tData + "/runtimes/node-22", "/usr/lib/python3"},
		NodeBinary: "/usr/local/bin/oz0-node", ProxySocketDir: tData + "/run/egress/demo/main",
	}
}

func tTarget(action policy.Action, net policy.Network, perPlugin bool) policy.Target {
	t := policy.Target{Kind: "server", Name: "main", Action: action, Backend: policy.BackendBwrap, Network: net}
	if perPlugin {
		uid := policy.PluginUID("demo")
		t.User = policy.User{PerPlugin: true, UID: uid, GID: uid}
	}
	return t
}

func tBuild(t *testing.T, tg policy.Target, h Host, cwd string, env map[string]string, lim manifest.Limits) *Spec {
	t.Helper()
	s, err := Build(&policy.Decision{Plugin: "demo", Commit: "0123456789abcdef0123456789abcdef01234567"}, tg, &manifest.Manifest{Name: "demo"}, "server",
		[]string{"python3", tPlugin + "/server.py"}, cwd, env, h, lim)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A strict server on a root Linux node: the plugin folder read-only, a managed
// runtime read-only (one under a system path is already there), the home
// writable, the proxy socket folder and the node binary (the bridge) at their
// places inside; its user, its limits; the data folder, key and every other
// plugin denied, the data folder first.
func TestBuildStrictServerOnARootNode(t *testing.T) {
	s := tBuild(t, tTarget(policy.Sandboxed, policy.NetProxy, true), tHost(), "", nil, manifest.Limits{MemoryMB: 64, Pids: 50})
	wantMounts := []Mount{
		{Source: tPlugin, Dest: tPlugin},
		{Source: tData + "/runtimes/node-22", Dest: tData + "/runtimes/node-22"},
		{Source: tHome, Dest: tHome, Writable: true},
		{Source: tData + "/run/egress/demo/main", Dest: InnerProxyDir},
		{Source: "/usr/local/bin/oz0-node", Dest: InnerNodeBin},
	}
	if !slices.Equal(s.Mounts, wantMounts) {
		t.Errorf("mounts\n%+v\nwant\n%+v", s.Mounts, wantMounts)
	}
	if s.Proxy == nil || s.Proxy.SocketDir != tData+"/run/egress/demo/main" || s.Proxy.Port != DefaultProxyPort || s.Bridge != InnerNodeBin {
		t.Errorf("proxy %+v bridge %q: want the server's socket folder bridged on %d", s.Proxy, s.Bridge, DefaultProxyPort)
	}
	uid := policy.PluginUID("demo")
	if !s.PluginUser || s.UID != uid || s.GID != uid {
		t.Errorf("user %v %d:%d, want the plugin's %d", s.PluginUser, s.UID, s.GID, uid)
	}
	wantDeny := []string{tData, tData + "/homes/alpha", tData + "/homes/zeta", tData + "/node.key", tData + "/plugins/alpha", tData + "/plugins/zeta"}
	if !slices.Equal(s.Deny, wantDeny) {
		t.Errorf("deny %q, want %q", s.Deny, wantDeny)
	}
	if s.Limits.MemoryBytes != 64<<20 || s.Limits.Pids != 50 || s.Limits.CPUPercent != DefaultLimits.CPUPercent || s.Limits.Procs != DefaultLimits.Procs {
		t.Errorf("limits %+v: want the manifest's memory and pids over the defaults %+v", s.Limits, DefaultLimits)
	}
	if s.Dir != tPlugin || s.Server != "main" || s.Kind != "server" || s.Hostname != "oz0-demo" || s.Seccomp != "default" || s.Backend != policy.BackendBwrap {
		t.Errorf("spec %+v", s)
	}
	if !slices.Equal(s.System, SystemMounts) {
		t.Errorf("system mounts differ from the allowlist")
	}
}

// Without a per-plugin user the tool runs as the node's user, and RLIMIT_NPROC,
// which would count every process of that user, is not set. Without the node's
// egress sockets there is nothing to bind and no bridge.
func TestBuildAsTheNodesUser(t *testing.T) {
	h := tHost()
	h.ProxySocketDir = ""
	s := tBuild(t, tTarget(policy.Sandboxed, policy.NetProxy, false), h, "", nil, manifest.Limits{})
	if s.PluginUser || s.UID != 0 || s.Limits.Procs != 0 {
		t.Errorf("user %v %d, procs %d: want the node's user without RLIMIT_NPROC", s.PluginUser, s.UID, s.Limits.Procs)
	}
	if s.Proxy != nil || s.Bridge != "" || len(s.Mounts) != 3 {
		t.Errorf("proxy %+v bridge %q mounts %+v: want none without the node's sockets", s.Proxy, s.Bridge, s.Mounts)
	}
}

// The working folder stays in the plugin folder or the home; "..", or an
// absolute path elsewhere, is refused.
func TestBuildWorkingFolder(t *testing.T) {
	tg := tTarget(policy.Sandboxed, policy.NetProxy, true)
	for cwd, want := range map[string]string{"": tPlugin, "sub/dir": tPlugin + "/sub/dir", tHome + "/work": tHome + "/work", tHome: tHome} {
		if s := tBuild(t, tg, tHost(), cwd, nil, manifest.Limits{}); s.Dir != want {
			t.Errorf("cwd %q: dir %q, want %q", cwd, s.Dir, want)
		}
	}
	for _, cwd := range []string{"..", "../../homes/other", "/etc", tData, tHome + "x"} {
		_, err := Build(&policy.Decision{Plugin: "demo"}, tg, &manifest.Manifest{Name: "demo"}, "server", []string{"x"}, cwd, nil, tHost(), manifest.Limits{})
		if err == nil || !strings.Contains(err.Error(), "outside the plugin folder and home") {
			t.Errorf("cwd %q: %v, want a refusal", cwd, err)
		}
	}
}

// Nothing starts for a refused target, an empty command or relative folders.
func TestBuildRefuses(t *testing.T) {
	d := &policy.Decision{Plugin: "demo"}
	m := &manifest.Manifest{Name: "demo"}
	refused := tTarget(policy.Refused, policy.NetNone, false)
	refused.Reasons = []string{"sandbox: host"}
	if _, err := Build(d, refused, m, "server", []string{"x"}, "", nil, tHost(), manifest.Limits{}); err == nil || !strings.Contains(err.Error(), "refused: sandbox: host") {
		t.Errorf("refused target: %v", err)
	}
	ok := tTarget(policy.Sandboxed, policy.NetProxy, false)
	for _, argv := range [][]string{nil, {""}} {
		if _, err := Build(d, ok, m, "server", argv, "", nil, tHost(), manifest.Limits{}); err == nil || !strings.Contains(err.Error(), "empty command") {
			t.Errorf("argv %q: %v", argv, err)
		}
	}
	for _, edit := range []func(h *Host){
		func(h *Host) { h.PluginDir = "plugins/demo" },
		func(h *Host) { h.Home = "homes/demo" },
		func(h *Host) { h.DataDir = "" },
	} {
		h := tHost()
		edit(&h)
		if _, err := Build(d, ok, m, "server", []string{"x"}, "", nil, h, manifest.Limits{}); err == nil || !strings.Contains(err.Error(), "must be an absolute path") {
			t.Errorf("host %+v: %v", h, err)
		}
	}
}

// The tool's environment is the node's minimal set plus the manifest's env, which
// cannot replace the node's own variables; nothing comes from the node's own
// environment. An unsandboxed target gets backend none and no proxy variables.
func TestBuildEnvironment(t *testing.T) {
	t.Setenv("OZ0_NODE_SECRET", "node-only")
	env := map[string]string{"NOTES": "n", "HOME": "/root", "HTTP_PROXY": "http://evil:1", "OZ0_PLUGIN": "other", "PATH": "/plugin/bin"}
	s := tBuild(t, tTarget(policy.Sandboxed, policy.NetProxy, true), tHost(), "", env, manifest.Limits{})
	got := map[string]string{}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{
		"NOTES": "n", "HOME": tHome, "HTTP_PROXY": "http://127.0.0.1:3128", "OZ0_PLUGIN": "demo", "PATH": "/plugin/bin",
		"TMPDIR": "/tmp", "PLUGIN_ROOT": tPlugin, "CLAUDE_PLUGIN_DATA": tHome, "NODE_USE_ENV_PROXY": "1", "NO_PROXY": "",
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s=%q, want %q", k, g, v)
		}
	}
	if _, ok := got["OZ0_NODE_SECRET"]; ok {
		t.Error("the node's own environment reached the tool")
	}
	if !slices.IsSorted(s.Env) {
		t.Error("environment not sorted (specs must be deterministic)")
	}

	u := tBuild(t, tTarget(policy.Unsandboxed, policy.NetHost, false), tHost(), "", nil, manifest.Limits{})
	if u.Backend != policy.BackendNone || u.Proxy != nil {
		t.Errorf("unsandboxed: backend %q proxy %+v", u.Backend, u.Proxy)
	}
	for _, kv := range u.Env {
		if strings.Contains(strings.ToUpper(kv), "PROXY=") {
			t.Errorf("unsandboxed tool got %s", kv)
		}
	}
}

// On macOS (Seatbelt) the tool's temporary folder is in its home and Homebrew's
// programs come first; the proxy is the host-loopback port with its credential.
func TestBuildSeatbelt(t *testing.T) {
	h := tHost()
	h.OS, h.ProxySocketDir, h.ProxyPort, h.ProxyCredential = "darwin", "", 41000, "c0ffee"
	tg := tTarget(policy.Sandboxed, policy.NetProxy, false)
	tg.Backend = policy.BackendSeatbelt
	s := tBuild(t, tg, h, "", nil, manifest.Limits{})
	if !slices.Contains(s.Env, "TMPDIR="+tHome+"/tmp") || !slices.Contains(s.Env, "PATH="+DarwinPath) {
		t.Errorf("env %q: want TMPDIR in the home and Homebrew's PATH", s.Env)
	}
	if s.Proxy == nil || s.Proxy.Port != 41000 || s.Proxy.SocketDir != "" || s.Bridge != "" {
		t.Errorf("proxy %+v bridge %q: want the host port only", s.Proxy, s.Bridge)
	}
	if !slices.Contains(s.Env, "HTTPS_PROXY=http://oz0:c0ffee@127.0.0.1:41000") {
		t.Errorf("env %q: want the proxy URL with the credential", s.Env)
	}
}
