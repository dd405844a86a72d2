package install

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/netrule"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
)

// A Landlock build sandbox starts this binary as its runner, which must then act
// as the node's binary does.
func init() { reexec.Init() }

// bwrapBox is the build sandbox on this machine, or a skip saying what was not
// tested.
func bwrapBox(t *testing.T) *BuildSandbox { return boxOf(t, policy.BackendBwrap) }

func boxOf(t *testing.T, backend string) *BuildSandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: npm builds as the plugin's user in a build sandbox not tested")
	}
	be, err := backendlinux.New(backend)
	if err != nil {
		t.Fatal(err)
	}
	if pr := be.Probe(context.Background()); !pr.Works {
		t.Skipf("%s does not work here (%v): the npm build sandbox on it not tested", backend, pr.Err)
	}
	return &BuildSandbox{Backend: be}
}

// traversable opens the folders above a test's data folder to other users (search
// only), as a root node's /var/lib is: plugin users need the way down.
func traversable(t *testing.T, d datadir.Dir) {
	t.Helper()
	for p := filepath.Dir(d.Root); p != "/"; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(p, fi.Mode().Perm()|0o001)
		}
	}
}

// watchUIDs records, until stop is called, the uid of every process whose command
// line names npm and whose working folder lies under dir.
func watchUIDs(dir string) (stop func() map[uint32]bool) {
	seen := map[uint32]bool{}
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if _, err := strconv.Atoi(e.Name()); err != nil {
					continue
				}
				cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				if !strings.Contains(string(cmd), "npm") {
					continue
				}
				cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
				if !strings.HasPrefix(cwd, dir) {
					continue
				}
				var st syscall.Stat_t
				if syscall.Stat("/proc/"+e.Name(), &st) == nil {
					mu.Lock()
					seen[st.Uid] = true
					mu.Unlock()
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() map[uint32]bool {
		close(done)
		wg.Wait()
		return seen
	}
}

// On a root node a strict npm build runs as the plugin's user, in a bwrap sandbox,
// never as root; the files it leaves are the node's again afterwards.
func TestNPMBuildRunsAsPluginUserInSandbox(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	box := bwrapBox(t)
	traversable(t, d)
	repo, _ := newRepo(t, "npm-postinstall-marker", runsSomething)
	stop := watchUIDs(d.Staging())
	in, err := Install(context.Background(), d, Options{Source: repo, BuildSandbox: box, Log: quiet()})
	seen := stop()
	if err != nil {
		t.Fatal(err)
	}
	uid := policy.PluginUID(in.Name)
	if !seen[uid] || len(seen) != 1 {
		t.Fatalf("npm ran as uids %v, want only the plugin's %d", seen, uid)
	}
	if !strings.Contains(in.Build, "bwrap build sandbox as the plugin's user "+strconv.Itoa(int(uid))) {
		t.Errorf("build record %q does not say where npm ran", in.Build)
	}
	if m := findMarkers(d.Root); len(m) != 0 {
		t.Fatalf("npm lifecycle scripts ran: %v", m)
	}
	idx := filepath.Join(in.Dir, "node_modules", "marker-dep", "index.js")
	var st syscall.Stat_t
	if err := syscall.Lstat(idx, &st); err != nil {
		t.Fatalf("the local dependency was not installed: %v", err)
	}
	filepath.WalkDir(in.Dir, func(p string, _ os.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && syscall.Lstat(p, &st) == nil && (st.Uid != 0 || st.Gid != 0) {
			t.Errorf("%s is owned by %d:%d after the build, want root", p, st.Uid, st.Gid)
		}
		return nil
	})
}

// The build sandbox holds npm to the plugin's files even where a link leads out
// of them (the tree here is not checked first): a node_modules that points at a
// folder outside is not emptied — inside the sandbox that folder does not exist.
func TestNPMBuildSandboxWritesOnlyTheTree(t *testing.T) {
	for _, backend := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock} {
		t.Run(backend, func(t *testing.T) { testNPMBuildSandboxWritesOnlyTheTree(t, backend) })
	}
}

func testNPMBuildSandboxWritesOnlyTheTree(t *testing.T, backend string) {
	d := newData(t)
	needRuntime(t, d, false, true)
	box := boxOf(t, backend)
	// The build sandbox's last user unmounts runsc's empty network namespace: one
	// left is a leak (unmounted here so the temp folder can go).
	t.Cleanup(func() {
		if syscall.Unmount(filepath.Join(d.Run(), "runsc", "null-netns"), 2 /* MNT_DETACH */) == nil {
			t.Error("the build sandbox left runsc's null-netns mounted in the data folder")
		}
	})
	traversable(t, d)
	s, check := sentinel(t, d)
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	st, err := newStaging(d)
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(st, "tree")
	if _, err := extractFixture("npm-postinstall-marker", tree); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s, filepath.Join(tree, "node_modules")); err != nil {
		t.Fatal(err)
	}
	b := &builder{log: quiet(), d: d, tree: tree, staging: st, plugin: "npm-confined", commit: "c", box: box}
	err = b.npm()
	check()
	if err != nil {
		t.Fatalf("npm in the sandbox: %v", err)
	}
	if !strings.Contains(strings.Join(b.steps, "; "), "as the plugin's user") {
		t.Fatalf("npm did not run as the plugin's user: %q", b.steps)
	}
	if fi, err := os.Lstat(filepath.Join(tree, "node_modules")); err != nil || !fi.IsDir() {
		t.Fatalf("node_modules in the tree after the build: %v %v", fi, err)
	}
}

// Dependencies come from the registry through the build's egress proxy, the only
// network the build sandbox has: a plugin without a lockfile is resolved and
// installed from it.
func TestNPMBuildReachesTheRegistryThroughTheProxy(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	box := bwrapBox(t)
	traversable(t, d)
	reg, err := NPMRegistry(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(reg)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Hostname()
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil {
		t.Skipf("the package registry does not resolve here (%v): builds from the registry not tested", err)
	}
	// This machine reaches the registry at an address the guard refuses unless the
	// operator opens it, as an operator with a mirror would.
	var allow []netip.Prefix
	for _, a := range addrs {
		allow = append(allow, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":  builtJSON("npm-registry"),
		"package.json": `{"name":"npm-registry","version":"1.0.0","dependencies":{"ms":"2.1.3"}}`,
	})
	in, err := Install(context.Background(), d, Options{Source: repo, BuildSandbox: box, AllowCIDRs: allow, Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(in.Dir, "node_modules", "ms", "package.json")); !strings.Contains(got, `"version": "2.1.3"`) {
		t.Fatalf("ms not installed from the registry: %s", got)
	}
	if !strings.Contains(in.Build, "network only "+host+" through the node's egress proxy") {
		t.Errorf("build record %q", in.Build)
	}

	// Without the operator's range the guard refuses the registry's address: the
	// build fails closed and says which host, at which address, and the flag that
	// admits it.
	var refused []string
	for _, a := range addrs {
		if a = a.Unmap(); netrule.Forbidden(a) {
			refused = append(refused, a.String())
		}
	}
	if len(refused) == 0 {
		t.Logf("the registry resolves to public addresses here: the guard's refusal of it is not tested")
		return
	}
	repo2, _ := newRepo(t, "", map[string]string{
		"plugin.json":  builtJSON("npm-registry-2"),
		"package.json": `{"name":"npm-registry-2","version":"1.0.0","dependencies":{"ms":"2.1.3"}}`,
	})
	_, err = Install(context.Background(), newDataTraversable(t), Options{Source: repo2, BuildSandbox: box, Log: quiet()})
	if err == nil || !strings.Contains(err.Error(), host+":"+portOf(u)+" resolves to ") || !strings.Contains(err.Error(), "an address the egress guard refuses") {
		t.Fatalf("a registry address the guard refuses: %v", err)
	}
	named := false
	for _, a := range refused {
		named = named || strings.Contains(err.Error(), "--egress-allow-cidr "+a+"/")
	}
	if !named {
		t.Fatalf("the refusal does not name the address and the flag that admits it (%v): %v", refused, err)
	}
}

// portOf is the port a URL reaches (its scheme's default when none is written).
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}

func newDataTraversable(t *testing.T) datadir.Dir {
	d := newData(t)
	traversable(t, d)
	return d
}

// The build sandbox's only network is its proxy, and the proxy reaches only the
// registry: another host is refused by the proxy, and a direct connection finds
// no network at all. Nothing is written outside the tree and the build's home.
func TestBuildSandboxNetworkIsOnlyTheRegistry(t *testing.T) {
	for _, backend := range []string{policy.BackendBwrap, policy.BackendLandlock} {
		t.Run(backend, func(t *testing.T) { testBuildSandboxNetworkIsOnlyTheRegistry(t, backend) })
	}
}

func testBuildSandboxNetworkIsOnlyTheRegistry(t *testing.T, backend string) {
	d := newData(t)
	box := boxOf(t, backend)
	traversable(t, d)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("no /usr/bin/curl: the build sandbox's network not tested")
	}
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	st, err := newStaging(d)
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(st, "tree")
	os.Mkdir(tree, 0o700)
	b := &builder{log: quiet(), d: d, tree: tree, staging: st, plugin: "net-probe", commit: "c", box: box, nodePath: "/usr/bin/node"}
	_, err = b.sandboxed([]string{"/usr/bin/curl", "-sS", "--max-time", "10", "-o", "/dev/null", "https://example.com/"}, nil)
	if err == nil || !strings.Contains(err.Error(), "egress proxy refused 1 connection") {
		t.Fatalf("another host through the build's proxy: %v", err)
	}
	_, err = b.sandboxed([]string{"/usr/bin/curl", "-sS", "--max-time", "10", "--noproxy", "*", "-o", "/dev/null", "https://example.com/"}, nil)
	if err == nil || !strings.Contains(err.Error(), "Could not resolve host") {
		t.Fatalf("a direct connection from the build sandbox: %v", err)
	}
}

// childBox is the build sandbox an install child (helpers_test.go) builds in.
func childBox(backend string) *BuildSandbox {
	be, err := backendlinux.New(backend)
	if err != nil {
		return nil
	}
	return &BuildSandbox{Backend: be}
}

// Builds reach the registry the operator's npm is configured with (a company
// mirror in their .npmrc), not one written into the node: the build's egress
// proxy is opened to that host alone. Here the mirror's name resolves to a
// loopback address, which the address guard refuses: the error names the
// mirror, its address and the flag that admits it.
func TestNPMBuildUsesTheOperatorsRegistry(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	bwrapBox(t)
	traversable(t, d)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".npmrc"), []byte("registry=http://mirror.test:4873/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	if reg, err := NPMRegistry(t.Context(), d); err != nil || reg != "http://mirror.test:4873/" {
		t.Fatalf("the registry npm is configured with: %q %v", reg, err)
	}
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":  builtJSON("npm-mirror"),
		"package.json": `{"name":"npm-mirror","version":"1.0.0","dependencies":{"ms":"2.1.3"}}`,
	})
	out, ok := inHostsSpec(t, "mirror.test", childSpec{Data: d.Root, Install: &Options{Source: repo}, Backend: policy.BackendBwrap})
	if ok || !strings.Contains(out, "mirror.test:4873 resolves to 127.0.0.1, an address the egress guard refuses") || !strings.Contains(out, "--egress-allow-cidr 127.0.0.1/32") {
		t.Fatalf("a build against the operator's mirror on a refused address:\n%s", out)
	}
}
