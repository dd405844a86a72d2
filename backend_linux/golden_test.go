package backendlinux

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"oz0.ai/node/internal/golden"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// goldenSpec is a strict-mode server sandbox on a root node with the proxy bridge.
func goldenSpec() *sandbox.Spec {
	return &sandbox.Spec{
		Plugin: "demo", Server: "main", Kind: "server", Commit: "0123456789ab", Backend: "bwrap",
		Argv:      []string{"python3", "/var/lib/oz0-node/plugins/demo/0123456789ab/server.py", "--tools", "echo"},
		Env:       []string{"HOME=/var/lib/oz0-node/homes/demo", "LD_PRELOAD=/x.so", "PATH=/usr/local/bin:/usr/bin:/bin", "SECRET=a b'c"},
		Dir:       "/var/lib/oz0-node/plugins/demo/0123456789ab",
		System:    append([]sandbox.Mount(nil), sandbox.SystemMounts...),
		PluginDir: "/var/lib/oz0-node/plugins/demo/0123456789ab",
		Home:      "/var/lib/oz0-node/homes/demo",
		Mounts: []sandbox.Mount{
			{Source: "/var/lib/oz0-node/plugins/demo/0123456789ab", Dest: "/var/lib/oz0-node/plugins/demo/0123456789ab"},
			{Source: "/var/lib/oz0-node/homes/demo", Dest: "/var/lib/oz0-node/homes/demo", Writable: true},
			{Source: "/var/lib/oz0-node/run/egress/demo", Dest: sandbox.InnerProxyDir},
			{Source: "/usr/local/bin/oz0-node", Dest: sandbox.InnerNodeBin},
		},
		UID: 1912345678, GID: 1912345678, PluginUser: true,
		Network: policy.NetProxy,
		Proxy:   &sandbox.Proxy{SocketDir: "/var/lib/oz0-node/run/egress/demo", SocketName: sandbox.ProxySocket, InnerDir: sandbox.InnerProxyDir, Port: 3128},
		Bridge:  sandbox.InnerNodeBin,
		Limits:  sandbox.DefaultLimits, Seccomp: "default", Hostname: "oz0-demo",
		DataDir: "/var/lib/oz0-node", Deny: []string{"/var/lib/oz0-node", "/var/lib/oz0-node/node.key"},
	}
}

// debianInspect is a merged-/usr Debian host without /lib32, /libx32 and /etc/pki.
func debianInspect(p string) PathInfo {
	switch p {
	case "/bin", "/sbin", "/lib", "/lib64":
		return PathInfo{Symlink: "usr" + p}
	case "/etc/localtime":
		return PathInfo{Symlink: "/usr/share/zoneinfo/Etc/UTC"}
	case "/lib32", "/libx32", "/etc/pki", "/etc/python3.11":
		return PathInfo{Missing: true}
	case "/usr/local/bin/oz0-node", "/etc/ld.so.cache", "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf",
		"/etc/host.conf", "/etc/gai.conf", "/etc/protocols", "/etc/services", "/etc/mime.types", "/etc/ld.so.conf":
		return PathInfo{File: true}
	}
	return PathInfo{}
}

func withBridge(t *testing.T, on bool) {
	old := bridgeAvailable
	bridgeAvailable = func() bool { return on }
	t.Cleanup(func() { bridgeAvailable = old })
}

func TestBwrapArgvGolden(t *testing.T) {
	withBridge(t, true)
	got, err := renderBwrap(goldenSpec(), debianInspect)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "bwrap-strict.golden", got)
}

func TestBwrapArgvHostNetworkGolden(t *testing.T) {
	withBridge(t, false)
	s := goldenSpec()
	s.Network, s.Proxy, s.Bridge = policy.NetHostProxyVars, &sandbox.Proxy{Port: 41234}, ""
	s.Mounts = s.Mounts[:2]
	got, err := renderBwrap(s, debianInspect)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "bwrap-auto.golden", got)
}

func TestOCIConfigGolden(t *testing.T) {
	withBridge(t, true)
	b, err := ociConfig(goldenSpec(), debianInspect, ociOptions{CgroupsPath: "oz0-demo-main-00000000", GOARCH: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(b.Spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "oci-strict.golden.json", string(out)+"\n")
	var skel []string
	for _, e := range b.Skel {
		switch {
		case e.Symlink != "":
			skel = append(skel, e.Path+" -> "+e.Symlink)
		case e.Dir:
			skel = append(skel, e.Path+"/")
		default:
			skel = append(skel, e.Path)
		}
	}
	golden.Check(t, "oci-strict-rootfs.golden", strings.Join(skel, "\n")+"\n")
}

// The tool's environment must travel in --args, never on bwrap's command line where
// ps shows it; the tool's argv follows "--".
func TestBwrapEnvironmentOnlyInArgsFD(t *testing.T) {
	withBridge(t, false)
	p, err := buildBwrap(goldenSpec(), debianInspect)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range p.argv() {
		if strings.Contains(a, "LD_PRELOAD") || strings.Contains(a, "SECRET") || strings.Contains(a, "a b'c") {
			t.Errorf("bwrap's command line carries %q", a)
		}
	}
	if got := strings.Join(p.argv(), " "); !strings.HasPrefix(got, "--args 3 -- /bin/sh -c "+gateScript+" oz0-gate python3 ") {
		t.Errorf("bwrap command line = %q", got)
	}
}

func TestBwrapNoMountPointUnderWritable(t *testing.T) {
	s := goldenSpec()
	s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/opt/rt", Dest: s.Home + "/rt"})
	if _, err := buildBwrap(s, debianInspect); !errors.Is(err, errMountUnderWritable) {
		t.Errorf("bwrap: mount under the home: err = %v, want errMountUnderWritable", err)
	}
	if _, err := ociConfig(s, debianInspect, ociOptions{GOARCH: "amd64"}); !errors.Is(err, errMountUnderWritable) {
		t.Errorf("gVisor: mount under the home: err = %v, want errMountUnderWritable", err)
	}
}

func TestBindSourceSymlinkRefused(t *testing.T) {
	s := goldenSpec()
	inspect := func(p string) PathInfo {
		if p == s.Home {
			return PathInfo{Symlink: "/etc"}
		}
		return debianInspect(p)
	}
	if _, err := buildBwrap(s, inspect); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("bwrap: a home that is a symlink: err = %v", err)
	}
	if _, err := ociConfig(s, inspect, ociOptions{GOARCH: "amd64"}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("gVisor: a home that is a symlink: err = %v", err)
	}
}

func TestUnknownSeccompProfileRefused(t *testing.T) {
	s := goldenSpec()
	s.Seccomp = "permissive"
	if _, err := buildBwrap(s, debianInspect); err == nil {
		t.Errorf("bwrap: an unknown seccomp profile was accepted")
	}
	if _, err := ociConfig(s, debianInspect, ociOptions{GOARCH: "amd64"}); err == nil {
		t.Errorf("gVisor: an unknown seccomp profile was accepted")
	}
}

// landlockSpec is goldenSpec on the Landlock tier: no socket or bridge, the
// proxy a loopback port of the host.
func landlockSpec() *sandbox.Spec {
	s := goldenSpec()
	s.Backend = policy.BackendLandlock
	s.Mounts = s.Mounts[:2]
	s.Bridge = ""
	s.Proxy = &sandbox.Proxy{Port: 40123}
	return s
}

// `sandbox show --backend landlock`: the runner, its rules, its network rule and
// what the tier does not cover, as a root node with Landlock ABI 7 shows it.
func TestLandlockRenderGolden(t *testing.T) {
	out, err := renderLandlock(landlockSpec(), debianInspect, 7, true)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "landlock-strict.golden", out)
}

// The gaps a node lists follow its kernel's Landlock ABI and whether it is root:
// a right the ABI lacks is named, one it has is not.
func TestLandlockGapsPerABI(t *testing.T) {
	ids := func(abi int, root bool) string {
		var out []string
		for _, g := range LandlockGaps(abi, root) {
			out = append(out, g.ID)
		}
		return strings.Join(out, " ")
	}
	const tier = "pid-namespace mount-namespace ipc-namespace transparent-egress port-not-address"
	for _, c := range []struct {
		abi  int
		root bool
		want string
	}{
		{7, true, tier},
		{6, true, tier},
		{7, false, tier + " no-cgroup"},
		{5, true, tier + " abi-signal"},
		{4, true, tier + " abi-ioctl abi-signal"},
		{3, true, tier + " abi-network abi-ioctl abi-signal"},
		{1, false, tier + " no-cgroup abi-truncate abi-network abi-ioctl abi-signal"},
	} {
		if got := ids(c.abi, c.root); got != c.want {
			t.Errorf("ABI %d, root %v: gaps %q, want %q", c.abi, c.root, got, c.want)
		}
	}
}
