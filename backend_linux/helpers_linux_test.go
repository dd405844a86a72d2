package backendlinux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

const testCommit = "0123456789abcdef0123456789abcdef01234567"

// testNode is a root node with fixture plugins installed by hand, planned the way
// `oz0-node exec` plans: plan.NodeFacts, then the backend as the probe decided.
type testNode struct {
	t    testing.TB
	dir  datadir.Dir
	node *plan.Node
	b    sandbox.Backend
	// proxy is the egress endpoint specs get (a test that serves one sets it).
	proxy plan.Proxy
}

// needRoot skips a test that needs a root node (per-plugin users, cgroups, runsc).
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: per-plugin users, cgroups and runsc need a root node; this promise is not tested here")
	}
}

// backendFor returns a working backend or skips, naming what was not tested.
// Landlock runs on a node of any user (the unprivileged battery,
// TestLandlockBatteryUnprivileged); the others are tested on a root node.
func backendFor(t testing.TB, name string) sandbox.Backend {
	t.Helper()
	if name != policy.BackendLandlock {
		needRoot(t)
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	pr, ok := probed[name]
	if !ok {
		b, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		p := b.Probe(context.Background())
		pr = probeResult{b, p}
		probed[name] = pr
	}
	if !pr.p.Works {
		t.Skipf("backend %s does not work here (%v): not tested on %s", name, pr.p.Err, name)
	}
	return pr.b
}

type probeResult struct {
	b sandbox.Backend
	p sandbox.Probe
}

var (
	probeMu sync.Mutex
	probed  = map[string]probeResult{}
)

// chmodChain makes the temp folders above the data folder traversable (0711), as
// the node requires of a data folder's parents on a root node.
func chmodChain(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

func newTestNode(t testing.TB, b sandbox.Backend, plugins ...string) *testNode {
	t.Helper()
	tmp := t.TempDir()
	chmodChain(t, tmp)
	d, err := datadir.New(filepath.Join(tmp, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	for _, name := range plugins {
		if _, err := fixtures.Extract(name, d.PluginCommit(name, testCommit)); err != nil {
			t.Fatal(err)
		}
		if err := installed.Activate(d, installed.Meta{Name: name, Commit: testCommit, Source: "test", InstalledAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	n := plan.New(d, config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: b.Name()}, probe.Assume("linux", b.Name(), b.Name() == policy.BackendGVisor), nil)
	// Small node limits so bombs hit them fast on a shared 2-core machine.
	n.Limits = testLimits
	// Every sandbox has ended by now: a null-netns mount left is a leak.
	t.Cleanup(func() {
		if unmountNullNetns(filepath.Join(d.Run(), "runsc")) {
			t.Error("a null-netns mount was left in the data folder after its sandboxes ended")
		}
	})
	return &testNode{t: t, dir: d, node: n, b: b}
}

var testLimits = sandbox.Limits{
	MemoryBytes: 256 << 20, Pids: 128, CPUPercent: 100,
	OpenFiles: 1024, FileSizeBytes: 1 << 30, Procs: 512,
}

// installPlugin writes a plugin from files and activates it, for cases the fixtures
// do not cover (a manifest env with LD_PRELOAD).
func (n *testNode) installPlugin(name string, files map[string]string) {
	n.t.Helper()
	dir := n.dir.PluginCommit(name, testCommit)
	for f, body := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			n.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			n.t.Fatal(err)
		}
	}
	if err := installed.Activate(n.dir, installed.Meta{Name: name, Commit: testCommit, Source: "test", InstalledAt: time.Now()}); err != nil {
		n.t.Fatal(err)
	}
}

// spec is the sandbox `oz0-node exec PLUGIN -- argv` gets.
func (n *testNode) spec(plugin string, argv ...string) *sandbox.Spec {
	n.t.Helper()
	p, err := n.node.One(plugin)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := p.EnsureHome(); err != nil {
		n.t.Fatal(err)
	}
	s, _, err := p.ExecSpec("", argv, n.proxy)
	if err != nil {
		n.t.Fatal(err)
	}
	if s.Backend != n.b.Name() {
		n.t.Fatalf("plugin %s planned on backend %q, want %q", plugin, s.Backend, n.b.Name())
	}
	if err := p.EnsureView(s); err != nil {
		n.t.Fatal(err)
	}
	return s
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// run starts s on the backend, as exec does (Process.Start), and waits.
func (n *testNode) run(s *sandbox.Spec, stdin string) result {
	n.t.Helper()
	return n.runVia(s, stdin, false)
}

// runVia is run; viaCmd starts the process as the MCP SDK's transport and the
// supervisor do, with Cmd.Start.
func (n *testNode) runVia(s *sandbox.Spec, stdin string, viaCmd bool) result {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := n.b.Command(ctx, s)
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() {
		if err := p.Cleanup(); err != nil {
			n.t.Errorf("cleanup: %v", err)
		}
	}()
	var out, errb bytes.Buffer
	p.Cmd.Stdin = strings.NewReader(stdin)
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &errb
	if viaCmd {
		err = p.Cmd.Start()
	} else {
		err = p.Start()
	}
	if err != nil {
		n.t.Fatalf("start sandbox: %v", err)
	}
	err = p.Cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("run sandbox: %v", err)
	}
	return result{out.String(), errb.String(), code}
}

// sh runs a shell command in plugin's sandbox.
func (n *testNode) sh(plugin, script string) result {
	n.t.Helper()
	return n.run(n.spec(plugin, "/bin/sh", "-c", script), "")
}

// py runs a Python program in plugin's sandbox.
func (n *testNode) py(plugin, prog string) result {
	n.t.Helper()
	return n.run(n.spec(plugin, "python3", "-c", prog), "")
}

// eachBackend runs f once per Linux backend that works here, or only on the one
// batteryBackendEnv names (the unprivileged battery's child).
func eachBackend(t *testing.T, f func(t *testing.T, b sandbox.Backend)) {
	for _, name := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock} {
		if only := os.Getenv(batteryBackendEnv); only != "" && only != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			f(t, backendFor(t, name))
		})
	}
}

// batteryBackendEnv, set in a battery child's environment, limits eachBackend to
// one backend.
const batteryBackendEnv = "OZ0_TEST_BATTERY_BACKEND"

// nodeUID is the uid a node's sandboxes run as: the plugin's own on a root node,
// the node's otherwise.
func nodeUID(plugin string) uint32 {
	if os.Geteuid() == 0 {
		return policy.PluginUID(plugin)
	}
	return uint32(os.Geteuid())
}

// landlockGap notes that a Landlock case meets one of the tier's documented gaps
// (LandlockGaps, docs/promises.md): the gap must be one this node lists, and the
// log says "documented gap ID" (the unprivileged battery reports them).
func landlockGap(t testing.TB, id string) {
	t.Helper()
	for _, g := range LandlockGaps(LandlockABI(), os.Geteuid() == 0) {
		if g.ID == id {
			t.Logf("documented gap %s: %s", id, g.Text)
			return
		}
	}
	t.Errorf("%q is not one of the Landlock tier's documented gaps on this node (%v)", id, LandlockGaps(LandlockABI(), os.Geteuid() == 0))
}

// skipForLandlockGap skips a case that cannot hold on the Landlock tier here
// because of a documented gap, saying which; any other skip of a battery case
// fails the unprivileged battery.
func skipForLandlockGap(t testing.TB, id string) {
	t.Helper()
	landlockGap(t, id)
	if !t.Failed() {
		t.Skipf("documented gap %s (docs/promises.md): not testable on this tier here", id)
	}
}

// hostLoopbackServer listens on the host's 127.0.0.1 and answers every connection
// with "host-loopback-reached"; a sandbox must not reach it. It returns the port.
func hostLoopbackServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host-loopback-reached\n"))
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
