package backendlinux

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/internal/syncbuf"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox/probe"
)

// landlockNode is a test node on the Landlock tier.
func landlockNode(t *testing.T, plugins ...string) *testNode {
	t.Helper()
	return newTestNode(t, backendFor(t, policy.BackendLandlock), plugins...)
}

// TestLandlockEgress: a Landlock sandbox reaches the network only through its egress endpoint on a
// host loopback port, with its credential (docs/promises.md §3): a direct
// connect to another loopback port or to an outside address fails, and so does
// every way around Landlock's TCP connect rule — UDP, a listener, TCP Fast Open,
// MPTCP, SCTP, a unix socket. A host listening on the proxy's port number at
// another address is reached: the documented gap port-not-address.
func TestLandlockEgress(t *testing.T) {
	n := landlockNode(t, "demo")
	if err := os.WriteFile(n.dir.TenantList(), []byte("example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var plog syncbuf.Buffer
	px, err := egress.New(egress.Config{TenantListPath: n.dir.TenantList(), Logger: slog.New(slog.NewTextHandler(&plog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	p, err := n.node.One("demo")
	if err != nil {
		t.Fatal(err)
	}
	server := p.ExecServer("")
	eps := egress.NewEndpoints(px, n.dir)
	want := egress.Want{Server: server, HostPort: true}
	if p.Decision.User.PerPlugin {
		want.GID = p.Decision.User.GID
	}
	if err := eps.Set(p.EgressRules(), []egress.Want{want}); err != nil {
		t.Fatal(err)
	}
	port, cred := eps.Endpoint("demo", server)
	if port == 0 || cred == "" {
		t.Fatalf("no host-port endpoint: port %d", port)
	}
	n.proxy = plan.Proxy{Sockets: true, Port: port, Credential: cred}
	other := hostLoopbackServer(t)
	// A unix socket any user may connect to, as a node's or a desktop's can be
	// for the node's own user: only the sandbox's rules may keep the tool out.
	sockPath := filepath.Join(n.dir.Run(), "open.sock")
	uln, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	if err := os.Chmod(sockPath, 0o666); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := uln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("unix-reached\n"))
			c.Close()
		}
	}()
	// The gap: the proxy's port number on another loopback address.
	sameNumber, err := net.Listen("tcp", "127.0.0.2:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on the proxy's port at another address: %v", err)
	}
	defer sameNumber.Close()
	go func() {
		for {
			c, err := sameNumber.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("same-port-reached\n"))
			c.Close()
		}
	}()
	s := n.spec("demo", "python3", "-c", fmt.Sprintf(`import base64, os, socket
port, other = %d, %d
auth = base64.b64encode(("oz0:" + %q).encode()).decode()
def ask(target, credential=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    h = "CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n" %% (target, target)
    if credential: h += "Proxy-Authorization: Basic " + auth + "\r\n"
    s.sendall((h + "\r\n").encode())
    print("proxy", target, "credential" if credential else "none", s.recv(200).split(b"\r\n")[0].decode())
ask("example.com:443")
ask("example.com:443", credential=False)
ask("127.0.0.1:%%d" %% other)
def try_(what, f):
    try: print(what, "REACHED", f())
    except OSError as e: print(what, "refused", e.errno)
def tcp(host, p):
    s = socket.create_connection((host, p), timeout=3); return s.recv(64)
try_("loopback", lambda: tcp("127.0.0.1", other))
try_("outside", lambda: tcp("192.0.2.1", 443))
try_("same-number", lambda: tcp("127.0.0.2", port))
try_("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 53)))
try_("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
def listener():
    s = socket.socket(); s.listen(1); return s.getsockname()
try_("listen", listener)
def bind():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); return s.getsockname()
try_("bind", bind)
def fastopen():
    s = socket.socket(); return s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", other))
try_("fastopen", fastopen)
try_("mptcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))
try_("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect(%q); return s.recv(64)
try_("unix", unix)
print("proxy var", os.environ["HTTPS_PROXY"].replace(%q, "CRED"))`, port, other, cred, sockPath, cred))
	r := n.run(s, "")
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, w := range []string{
		"proxy example.com:443 credential HTTP/1.1 403", // reached the proxy; the manifest allows no host
		"proxy example.com:443 none HTTP/1.1 407",       // without the credential the endpoint answers nothing else
		"proxy 127.0.0.1:" + strconv.Itoa(other) + " credential HTTP/1.1 403",
		"loopback refused", "outside refused", "udp refused", "icmp refused", "listen refused", "bind refused",
		"fastopen refused", "mptcp refused", "sctp refused", "unix refused",
		"proxy var http://oz0:CRED@127.0.0.1:" + strconv.Itoa(port),
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("want %q in:\n%s", w, r)
		}
	}
	if strings.Contains(r.stdout, "same-number REACHED") {
		landlockGap(t, "port-not-address")
	} else if !strings.Contains(r.stdout, "same-number refused") {
		t.Errorf("no answer for the proxy's port at another address:\n%s", r)
	}
	if strings.Count(r.stdout, "REACHED") > 1 {
		t.Errorf("the sandbox reached the network around its proxy:\n%s", r)
	}
}

// A rule's path reached through a symlink anywhere on it is refused: the runner
// opens every path without following one, so what a rule grants is what was
// planned, and the tool never starts.
func TestLandlockRuleThroughSymlinkRefused(t *testing.T) {
	n := landlockNode(t, "demo")
	s := n.spec("demo", "/bin/sh", "-c", "echo the tool ran")
	real := filepath.Join(filepath.Dir(s.Home), "elsewhere")
	if err := os.MkdirAll(filepath.Join(real, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(s.Home), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for i := range s.Mounts {
		if s.Mounts[i].Source == s.Home {
			s.Mounts[i].Source = filepath.Join(link, "home")
			s.Mounts[i].Dest = s.Mounts[i].Source
		}
	}
	r := n.run(s, "")
	if r.code != 125 || strings.Contains(r.stdout, "the tool ran") || !strings.Contains(r.stderr, "symbolic links") {
		t.Errorf("a rule through a symlinked folder was not refused before the tool ran:\n%s", r)
	}
}

// A root node never leaves a tool running as root to Landlock: with per-plugin
// users off, the start is refused and says why.
func TestLandlockRefusesARootTool(t *testing.T) {
	needRoot(t)
	n := landlockNode(t, "demo")
	s := n.spec("demo", "/bin/true")
	s.PluginUser, s.UID, s.GID = false, 0, 0
	_, err := n.b.Command(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "never runs a tool as root") {
		t.Errorf("a Landlock start as root: %v, want a refusal", err)
	}
}

// Every gap the tier can list is named in docs/promises.md, where operators read
// what each tier does not cover.
func TestLandlockGapsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/promises.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, abi := range []int{1, 2, 3, 4, 5, 6, 7} {
		for _, root := range []bool{false, true} {
			for _, g := range LandlockGaps(abi, root) {
				if !seen[g.ID] && !strings.Contains(string(doc), "`"+g.ID+"`") {
					t.Errorf("gap %s (%s) is not in docs/promises.md", g.ID, g.Text)
				}
				seen[g.ID] = true
			}
		}
	}
}

// The unprivileged battery's helper: inside a user namespace of the test's own
// (every uid mapped, so ids are the host's), as that namespace's root, it refuses
// user namespaces to the whole tree below (user.max_user_namespaces=0, a setting
// of that namespace, so the machine is untouched), becomes args[0]'s uid with no
// groups and execs the rest.
func init() { reexec.Register("test-unprivileged-no-userns", unprivilegedMain) }

func unprivilegedMain(args []string) int {
	if len(args) < 2 {
		return 2
	}
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "refuse user namespaces:", err)
		return 2
	}
	uid, err := strconv.Atoi(args[0])
	if err != nil {
		return 2
	}
	if err := becomeUser(uint32(uid), uint32(uid)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	err = syscall.Exec(args[1], args[1:], os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 2
}

// batteryTests are the escape and limits battery as the unprivileged Landlock
// run takes it: every case that applies to a node of any user.
var batteryTests = []string{
	"TestSandboxCannotReadNodeKey", "TestSandboxCannotReadDataFolder", "TestSandboxCannotReadOtherPlugin",
	"TestSandboxCannotReadShadow", "TestSandboxCannotReadHostTmp", "TestSandboxWritesItsViewNeverTheInstalledCommit",
	"TestSandboxHomeWritableAndPersistent", "TestSandboxSeesNoHostProcess", "TestSandboxEnvironmentIsMinimal",
	"TestSandboxLDPreloadDoesNotReachRunner", "TestSandboxRunsAsPluginUserWithoutCapabilities",
	"TestSandboxCannotSignalOtherPlugin", "TestSandboxTIOCSTIFails", "TestSandboxDeniedSyscallsRefused",
	"TestSandboxNoNetworkButLoopback", "TestSandboxNoOtherDescriptors", "TestSandboxCannotLoosenNodeFileModes",
	"TestSandboxNoHostIPC", "TestSandboxCannotLinkNodeKeyIntoHome", "TestSandboxForkBombContained", "TestSandboxMemoryBombContained",
	"TestSandboxCleanupKillsEverythingAndRemovesCgroup", "TestSandboxNoOrphanWhenNodeIsKilled",
	"TestSandboxLimitsApplyToTheTool", "TestSandboxPreloadRunsOnlyOnceLimitsHold",
	"TestLandlockEgress", "TestLandlockRuleThroughSymlinkRefused", "TestLandlockCleanupKillsDetachedProcesses",
	"TestLandlockTierChosenWhereUsernsRefused",
}

// unprivilegedUID is the node's user in the unprivileged battery: no account's.
const unprivilegedUID = 61_234

// The escape and limits battery on the Landlock tier, run again by a node that is
// not root, in a process tree where user namespaces are refused — where the tier
// is meant to run. Every case must hold or meet one of the tier's documented gaps
// (LandlockGaps); a case skipped for any other reason fails. (The root run is the
// same tests' landlock subtests in the ordinary run.)
func TestLandlockBatteryUnprivileged(t *testing.T) {
	needRoot(t) // mapping every uid into a namespace of the test's own takes root
	backendFor(t, policy.BackendLandlock)
	if _, err := os.Stat("/proc/sys/user/max_user_namespaces"); err != nil {
		t.Skipf("no user.max_user_namespaces here (%v): the unprivileged battery is not run", err)
	}
	dir, err := os.MkdirTemp("", "oz0-llb-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "backend_linux.test")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, bin} {
		if err := os.Chown(p, unprivilegedUID, unprivilegedUID); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(self, strconv.Itoa(unprivilegedUID), bin, "-test.run", "^("+strings.Join(batteryTests, "|")+")$",
		"-test.v", "-test.count=1", "-test.timeout=15m")
	cmd.Args[0] = reexec.Argv0("test-unprivileged-no-userns")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, batteryBackendEnv + "=" + policy.BackendLandlock}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappingsEnableSetgroups: true,
	}
	out, err := cmd.CombinedOutput()
	results := parseTestV(string(out))
	var table strings.Builder
	for _, name := range batteryTests {
		rs := results.under(name)
		if len(rs) == 0 {
			t.Errorf("%s did not run in the unprivileged battery", name)
			continue
		}
		for _, r := range rs {
			if len(rs.under(r.name)) > 1 && r.status != "FAIL" {
				continue // a parent: its subtests say what happened
			}
			gaps := r.gaps()
			switch {
			case r.status == "FAIL":
				t.Errorf("%s failed in the unprivileged battery:\n%s", r.name, r.output)
			case r.status == "SKIP" && len(gaps) == 0:
				t.Errorf("%s was skipped without a documented gap:\n%s", r.name, r.output)
			}
			verdict := "held"
			if r.status == "SKIP" {
				verdict = "not run"
			}
			if len(gaps) > 0 {
				verdict += "; documented gap " + strings.Join(gaps, ", ")
			}
			if r.status == "FAIL" {
				verdict = "FAILED"
			}
			fmt.Fprintf(&table, "  %-58s %s\n", r.name, verdict)
		}
	}
	if err != nil && !t.Failed() {
		t.Errorf("the battery exited with %v:\n%s", err, out)
	}
	t.Logf("the battery on landlock, uid %d, user namespaces refused:\n%s", unprivilegedUID, table.String())
}

// A process tree where user namespaces are refused, of a node that is not root,
// is where the Landlock tier is chosen: bwrap cannot run, and auto picks Landlock
// with a finding that says so. (Only the unprivileged battery's child runs it.)
func TestLandlockTierChosenWhereUsernsRefused(t *testing.T) {
	if os.Getenv(batteryBackendEnv) == "" || os.Geteuid() == 0 {
		t.Skip("runs in the unprivileged battery's child (TestLandlockBatteryUnprivileged), where user namespaces are refused")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Fatalf("user.max_user_namespaces is %q (%v) in the battery's tree, want 0", b, err)
	}
	r, err := probe.Run(context.Background(), probe.Platform{Backends: Backends()}, "auto", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != policy.BackendLandlock || r.Tier != 1 {
		t.Fatalf("auto chose %s (tier %d) where user namespaces are refused, want landlock on tier 1: %+v", r.Backend, r.Tier, r.Probes)
	}
	for _, p := range r.Probes {
		if p.Name == policy.BackendBwrap && p.Works {
			t.Errorf("bwrap works in a tree without user namespaces: the battery does not test what it claims")
		}
		if p.Name == policy.BackendLandlock && (len(p.Gaps) == 0 || !strings.HasPrefix(p.Version, "Landlock ABI ")) {
			t.Errorf("the landlock probe names no ABI or gaps: %+v", p)
		}
	}
	found := false
	for _, f := range r.Findings {
		found = found || f.Code == api.CodeLandlockTier && strings.Contains(f.Message, "bwrap")
	}
	if !found {
		t.Errorf("no %s finding naming bwrap: %+v", api.CodeLandlockTier, r.Findings)
	}
}

// testResult is one test's line in `go test -v` output with what it printed.
type testResult struct {
	name, status, output string
}

// gaps are the documented gaps the test noted.
func (r testResult) gaps() []string {
	var out []string
	for _, l := range strings.Split(r.output, "\n") {
		if _, rest, ok := strings.Cut(l, "documented gap "); ok {
			id, _, _ := strings.Cut(rest, ":")
			id, _, _ = strings.Cut(id, " ")
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

type testResults []testResult

// under are the results of test name and its subtests.
func (rs testResults) under(name string) testResults {
	var out testResults
	for _, r := range rs {
		if r.name == name || strings.HasPrefix(r.name, name+"/") {
			out = append(out, r)
		}
	}
	return out
}

// parseTestV reads `go test -v` output: each "--- STATUS: name" line and the
// more-indented lines after it, which are that test's log. The log lines of a
// test printed while it ran (before its result) belong to it too, by the
// "=== RUN" or "=== CONT" line that precedes them.
func parseTestV(out string) testResults {
	var rs testResults
	logs := map[string]*strings.Builder{}
	running := ""
	cur := -1
	for _, l := range strings.Split(out, "\n") {
		trim := strings.TrimLeft(l, " ")
		switch {
		case strings.HasPrefix(trim, "=== RUN ") || strings.HasPrefix(trim, "=== CONT ") || strings.HasPrefix(trim, "=== PAUSE "):
			running = strings.Fields(trim)[2]
			cur = -1
		case strings.HasPrefix(trim, "--- PASS: ") || strings.HasPrefix(trim, "--- FAIL: ") || strings.HasPrefix(trim, "--- SKIP: "):
			f := strings.Fields(trim)
			r := testResult{name: f[2], status: strings.TrimSuffix(f[1], ":")}
			if b := logs[r.name]; b != nil {
				r.output = b.String()
			}
			rs = append(rs, r)
			cur = len(rs) - 1
		case cur >= 0 && strings.HasPrefix(l, "    "):
			rs[cur].output += trim + "\n"
		case running != "":
			if logs[running] == nil {
				logs[running] = &strings.Builder{}
			}
			logs[running].WriteString(trim + "\n")
		}
	}
	return rs
}

// becomeUser switches every thread of this process to uid and gid with no
// supplementary groups, and checks that it took: no id of the root node is left.
func becomeUser(uid, gid uint32) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(int(gid), int(gid), int(gid)); err != nil {
		return fmt.Errorf("switch to gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("switch to uid %d: %w", uid, err)
	}
	r, e, s := unix.Getresuid()
	if r != int(uid) || e != int(uid) || s != int(uid) {
		return fmt.Errorf("switch to uid %d did not take: %d %d %d", uid, r, e, s)
	}
	if gs, err := syscall.Getgroups(); err != nil || len(gs) != 0 {
		return fmt.Errorf("supplementary groups left: %v %v", gs, err)
	}
	return nil
}

// The runner is the Landlock sandbox's reaper, cgroup or not: when the node ends
// the sandbox (Cleanup closes the control pipe), every process the tool left is
// killed, those that made a session of their own or were orphaned included, and
// the private tmp goes with them.
func TestLandlockCleanupKillsDetachedProcesses(t *testing.T) {
	n := landlockNode(t, "demo")
	st := n.start(n.spec("demo", "/bin/sh", "-c", "sleep 60 & setsid sleep 60 & (sleep 60 &); echo ready; wait"))
	runner := st.p.Cmd.Process.Pid
	var sleeps []int
	for deadline := time.Now().Add(5 * time.Second); len(sleeps) < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		sleeps = sleeps[:0]
		for pid, status := range hostProcs(runner) {
			if statusField(status, "Name") == "sleep" {
				sleeps = append(sleeps, pid)
			}
		}
	}
	if len(sleeps) < 3 {
		t.Fatalf("found %d of the tool's three sleeps below the runner: an orphan escaped the reaper", len(sleeps))
	}
	tmps, _ := os.ReadDir(filepath.Join(n.dir.Run(), "tmp"))
	if len(tmps) != 1 {
		t.Errorf("%d private tmps while one sandbox runs, want 1", len(tmps))
	}
	if err := st.p.Cleanup(); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if tmps, _ := os.ReadDir(filepath.Join(n.dir.Run(), "tmp")); len(tmps) != 0 {
		t.Errorf("the private tmp outlived its sandbox: %v", tmps)
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left []int
		for _, pid := range append(sleeps, runner) {
			if running(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the sandbox survive its cleanup: %v", left)
		}
	}
}
