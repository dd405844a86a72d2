package backendlinux

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/internal/syncbuf"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// othersKeepWorking checks, while a bomb runs, that the node can still start
// processes and that another plugin's running sandbox is alive and a new one starts.
func othersKeepWorking(t *testing.T, n *testNode, other *started) {
	t.Helper()
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the node cannot start a process while the bomb runs: %v", err)
	}
	if !other.alive() {
		t.Errorf("the other plugin's sandbox died")
	}
	if r := n.sh("egress-demo", "echo alive"); r.code != 0 || strings.TrimSpace(r.stdout) != "alive" {
		t.Errorf("another plugin's sandbox does not start while the bomb runs: %s", r)
	}
}

func TestSandboxForkBombContained(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		if os.Geteuid() != 0 {
			skipForLandlockGap(t, "no-cgroup") // nothing would hold a bomb on this shared machine
		}
		n := newTestNode(t, b, "demo", "egress-demo")
		other := n.start(n.spec("egress-demo", "/bin/sh", "-c", "echo ready; exec sleep 60"))
		bomb := n.start(n.spec("demo", "python3", "-c", `import os, sys, time
print("ready", flush=True)
end = time.time() + 8
while time.time() < end:
    try: os.fork()
    except OSError: time.sleep(0.01)
os._exit(0)`))
		time.Sleep(2 * time.Second)
		othersKeepWorking(t, n, other)
		if b.Name() != policy.BackendGVisor {
			// The bomb's processes stay inside its limit.
			count := len(hostProcs(bomb.p.Cmd.Process.Pid))
			if count > testLimits.Pids+2 {
				t.Errorf("the fork bomb has %d processes, above pids.max %d", count, testLimits.Pids)
			}
		}
		bomb.stop()
	})
}

func TestSandboxMemoryBombContained(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		if os.Geteuid() != 0 {
			skipForLandlockGap(t, "no-cgroup") // nothing would hold a bomb on this shared machine
		}
		n := newTestNode(t, b, "demo", "egress-demo")
		other := n.start(n.spec("egress-demo", "/bin/sh", "-c", "echo ready; exec sleep 60"))
		done := make(chan result, 1)
		go func() {
			done <- n.py("demo", `import time
b = []
while True:
    b.append(bytearray(32 << 20))`)
		}()
		select {
		case r := <-done:
			if r.code == 0 {
				t.Errorf("the memory bomb was not stopped: %s", r)
			}
			t.Logf("memory bomb ended: exit %d", r.code)
		case <-time.After(60 * time.Second):
			t.Fatal("the memory bomb ran for 60 s: not contained")
		}
		othersKeepWorking(t, n, other)
	})
}

func TestSandboxCleanupKillsEverythingAndRemovesCgroup(t *testing.T) {
	for _, name := range []string{policy.BackendBwrap, policy.BackendLandlock} {
		if only := os.Getenv(batteryBackendEnv); only != "" && only != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := backendFor(t, name)
			if os.Geteuid() != 0 {
				// Without a cgroup, a process the tool detached outlives a kill -9
				// of the runner, which is how this case stops the sandbox.
				skipForLandlockGap(t, "no-cgroup")
			}
			testCleanupKillsEverything(t, b)
		})
	}
}

func testCleanupKillsEverything(t *testing.T, b sandbox.Backend) {
	n := newTestNode(t, b, "demo")
	st := n.start(n.spec("demo", "/bin/sh", "-c", "sleep 60 & sleep 60 & setsid sleep 60 & echo ready; wait"))
	var procs map[int]string
	var sandboxPid int
	for deadline := time.Now().Add(5 * time.Second); sandboxPid == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		procs = hostProcs(st.p.Cmd.Process.Pid)
		for pid, status := range procs {
			if statusField(status, "Name") == "sleep" {
				sandboxPid = pid
			}
		}
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sandboxPid))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, l := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && strings.Contains(parts[2], "oz0-demo-") && (parts[1] == "pids" || parts[1] == "memory") {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", parts[1], parts[2]))
		}
	}
	if len(dirs) != 2 {
		t.Fatalf("the sandbox is not in its own memory and pids cgroups: %s", cg)
	}
	// Stop as a supervisor would: kill the runner, then Cleanup.
	st.stop()
	for pid, before := range procs {
		if now, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil && !zombie(pid) &&
			statusField(string(now), "Name") == statusField(before, "Name") {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			t.Errorf("pid %d (%s, %s, ppid %s, was ppid %s) survived Cleanup; cgroups %s", pid, statusField(before, "Name"), statusField(string(now), "State"), statusField(string(now), "PPid"), statusField(before, "PPid"), cg)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s survived Cleanup", d)
		}
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// The "test-node" helper is a real node process for the orphan test: it starts one
// sandbox for plugin demo from a data folder and waits to be killed.
func init() { reexec.Register("test-node", testNodeMain) }

func testNodeMain(args []string) int {
	if len(args) != 2 {
		return 2
	}
	d, _ := datadir.New(args[1])
	b, err := New(args[0])
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	n := plan.New(d, config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: b.Name()}, probe.Assume("linux", b.Name(), b.Name() == policy.BackendGVisor), nil)
	n.Limits = testLimits
	p, err := n.One("demo")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, _, err := p.ExecSpec("", []string{"/bin/sh", "-c", "sleep 60 & echo ready; wait"}, plan.Proxy{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	proc, err := b.Command(context.Background(), s)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	proc.Cmd.Stdout = os.Stdout
	if err := proc.Cmd.Start(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	select {}
}

func TestSandboxNoOrphanWhenNodeIsKilled(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		n.spec("demo", "true") // the home exists, as after a start
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		node := exec.Command(self, b.Name(), n.dir.Root)
		node.Args[0] = reexec.Argv0("test-node")
		node.Env = []string{}
		out, _ := node.StdoutPipe()
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
		defer node.Process.Kill()
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("the node did not start its sandbox: %q", line)
		}
		tree := hostProcs(node.Process.Pid)
		delete(tree, node.Process.Pid)
		if len(tree) == 0 {
			t.Fatal("no sandbox processes under the node")
		}
		var cgroups []string
		for pid := range tree {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && strings.Contains(parts[2], "/oz0-demo-") {
						cgroups = append(cgroups, filepath.Join("/sys/fs/cgroup", parts[1], parts[2]))
					}
				}
			}
		}
		node.Process.Signal(syscall.SIGKILL)
		node.Wait()
		deadline := time.Now().Add(time.Second)
		var left []string
		for {
			left = left[:0]
			for pid, status := range tree {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && !zombie(pid) {
					left = append(left, strconv.Itoa(pid)+" "+statusField(status, "Name"))
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("a second after kill -9 of the node, sandbox processes survive: %v", left)
		}
		// What a killed node cannot clean: its cgroups, runsc state and null-netns
		// mount (the next node start's sweep does; cgroups here the test does).
		for _, c := range cgroups {
			os.Remove(c)
		}
		if b.Name() == policy.BackendGVisor {
			if _, err := Sweep(context.Background(), n.dir.Root, time.Hour); err != nil {
				t.Errorf("sweep after the killed node: %v", err)
			}
			p := filepath.Join(n.dir.Run(), "runsc", "null-netns")
			for deadline := time.Now().Add(5 * time.Second); nsfsMounts(t, p) > 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				Sweep(context.Background(), n.dir.Root, time.Hour) // the killed node's lock goes as it is reaped
			}
			if c := nsfsMounts(t, p); c > 0 {
				t.Errorf("%d null-netns mounts of the killed node left after the next start's sweep", c)
			}
		}
	})
}

// copyNodeBinary puts this test binary where a plugin user can execute it, as the
// node's installed binary would be, for the in-sandbox egress bridge.
func copyNodeBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	chmodChain(t, dir)
	dst := filepath.Join(dir, "oz0-node")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return dst
}

// The Landlock tier has no network namespace and no bridge; its egress is
// TestLandlockEgress.
func TestSandboxNetworkOnlyThroughProxyBridge(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		if b.Name() == policy.BackendLandlock {
			return
		}
		n := newTestNode(t, b, "demo")
		n.node.NodeBinary = copyNodeBinary(t)
		if err := os.WriteFile(n.dir.TenantList(), []byte("example.com\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var plog syncbuf.Buffer
		px, err := egress.New(egress.Config{TenantListPath: n.dir.TenantList(), Logger: slog.New(slog.NewTextHandler(&plog, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		// The endpoint of the server whose sandbox spec takes, as the node opens it.
		p, err := n.node.One("demo")
		if err != nil {
			t.Fatal(err)
		}
		server := p.ExecServer("")
		sock := filepath.Join(n.dir.EgressServerSocketDir("demo", server), sandbox.ProxySocket)
		if _, err := px.AddPlugin(egress.PluginRules{Plugin: "demo"}, egress.Listen{Socket: sock, Server: server, SocketGroup: int(p.Decision.User.GID)}); err != nil {
			t.Fatal(err)
		}
		n.proxy = plan.Proxy{Sockets: true}
		port := hostLoopbackServer(t)
		s := n.spec("demo", "python3", "-c", fmt.Sprintf(`import socket, os
def ask(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (target, target)).encode())
    print("proxy", target, s.recv(200).split(b"\r\n")[0].decode())
ask("example.com:443")
ask("127.0.0.1:%d")
try:
    socket.create_connection(("127.0.0.1", %d), timeout=3); print("host port REACHED")
except OSError as e: print("host port refused", e.errno)
print("proxy var", os.environ["HTTPS_PROXY"])
# A plugin handing the proxy something other than a listener is refused.
try:
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); u.connect(%q)
    r, w = os.pipe()
    socket.send_fds(u, [b"\x00oz0-handoff\n"], [w])
    print("bogus handoff", u.recv(200).decode().strip())
except OSError as e: print("bogus handoff failed", e)`, port, port, sandbox.InnerProxyDir+"/"+sandbox.ProxySocket))
		if s.Bridge == "" || s.Proxy == nil {
			t.Fatalf("the spec has no proxy bridge: %+v", s.Proxy)
		}
		r := n.run(s, "")
		if r.code != 0 {
			t.Fatal(r)
		}
		for _, want := range []string{
			"proxy example.com:443 HTTP/1.1 403", // the plugin's manifest allows no host
			"proxy 127.0.0.1:" + strconv.Itoa(port) + " HTTP/1.1 403",
			"host port refused",
			"proxy var http://127.0.0.1:3128",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("want %q in:\n%s", want, r)
			}
		}
		// Under bwrap the bridge hands its listener to the proxy rather than
		// relaying; gVisor's sockets are its own, so there it relays.
		handedOff := strings.Contains(plog.String(), "egress endpoint handed off")
		if b.Name() == policy.BackendBwrap {
			if !handedOff || strings.Contains(r.stderr, "relaying") {
				t.Errorf("bwrap: the bridge did not hand off its listener; proxy log:\n%s\nstderr: %s", plog.String(), r.stderr)
			}
			if !strings.Contains(r.stdout, "bogus handoff refused: not a socket") {
				t.Errorf("bwrap: a pipe handed to the proxy was not refused:\n%s", r.stdout)
			}
		} else if handedOff {
			t.Errorf("%s: a listener was handed off from a sandbox whose sockets are not the host's", b.Name())
		}
	})
}

// The parent-death signal of bwrap fires when the thread that forked it exits, and
// any thread may have forked a sandbox: asUser, which borrows a thread for prlimit
// under the plugin's ids, must give it back to the runtime alive and as root.
func TestAsUserKeepsItsThreadAndRestoresRoot(t *testing.T) {
	needRoot(t)
	uid := policy.PluginUID("demo")
	for i := 0; i < 5; i++ {
		var tid int
		var during string
		err := asUser(uid, uid, func() error {
			tid = unix.Gettid()
			b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
			during = statusField(string(b), "Uid")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		u := strconv.FormatUint(uint64(uid), 10)
		want := u + " " + u + " 0 " + u // real, effective, saved (kept 0 to switch back), fs
		if during != want {
			t.Errorf("during asUser the thread ran as %q, want %q", during, want)
		}
		time.Sleep(50 * time.Millisecond)
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
		if err != nil {
			t.Fatalf("thread %d exited after asUser: a sandbox it forked would get its parent-death signal", tid)
		}
		if u, g := statusField(string(b), "Uid"), statusField(string(b), "Gid"); u != "0 0 0 0" || g != "0 0 0 0" {
			t.Errorf("thread %d kept the plugin's ids after asUser: Uid %q Gid %q", tid, u, g)
		}
	}
}

// The tool starts with its limits already in place: rlimits in its own
// /proc/self/limits, and (bwrap) its own cgroup in memory, pids and cpu; started
// as exec starts it (Process.Start) and as the supervisor and the MCP SDK do
// (Cmd.Start).
func TestSandboxLimitsApplyToTheTool(t *testing.T) {
	for _, viaCmd := range []bool{false, true} {
		t.Run(map[bool]string{false: "Process.Start", true: "Cmd.Start"}[viaCmd], func(t *testing.T) {
			testSandboxLimitsApplyToTheTool(t, viaCmd)
		})
	}
}

func testSandboxLimitsApplyToTheTool(t *testing.T, viaCmd bool) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		r := n.runVia(n.spec("demo", "/bin/sh", "-c", "cat /proc/self/limits"), "", viaCmd)
		if r.code != 0 {
			t.Fatal(r)
		}
		limits := r.stdout
		want := []struct{ name, value string }{
			{"Max open files", strconv.Itoa(testLimits.OpenFiles)},
			{"Max core file size", "0"},
			{"Max file size", strconv.FormatInt(testLimits.FileSizeBytes, 10)},
		}
		if os.Geteuid() == 0 {
			// RLIMIT_NPROC counts a uid's processes: only per-plugin users get it.
			want = append(want, struct{ name, value string }{"Max processes", strconv.Itoa(testLimits.Procs)})
		}
		for _, want := range want {
			found := false
			for _, l := range strings.Split(limits, "\n") {
				if strings.HasPrefix(l, want.name) {
					f := strings.Fields(strings.TrimPrefix(l, want.name))
					found = len(f) >= 2 && f[0] == want.value && f[1] == want.value
					if !found {
						t.Errorf("%s: %q, want soft and hard %s", want.name, l, want.value)
					}
				}
			}
			if !found && !strings.Contains(limits, want.name) {
				t.Errorf("no %q in /proc/self/limits:\n%s", want.name, limits)
			}
		}
		if b.Name() == policy.BackendGVisor {
			return // the sentry's cgroup holds the whole gVisor sandbox
		}
		if os.Geteuid() != 0 {
			landlockGap(t, "no-cgroup")
			return
		}
		// Seen from the host: inside, a sandbox born in its group has a cgroup
		// namespace rooted there and sees only "/".
		st := n.startVia(n.spec("demo", "/bin/sh", "-c", "echo ready; exec sleep 60"), viaCmd)
		runner := st.p.Cmd.Process.Pid
		var tool int
		for deadline := time.Now().Add(5 * time.Second); tool == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			for pid, status := range hostProcs(runner) {
				if statusField(status, "Name") == "sleep" {
					tool = pid
				}
			}
		}
		if tool == 0 {
			t.Fatal("no tool process under the sandbox's runner")
		}
		inGroups := func(pid int) error {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil {
				return err
			}
			for _, ctl := range []string{"memory", "pids", "cpu"} {
				ok := false
				for _, l := range strings.Split(string(b), "\n") {
					parts := strings.SplitN(l, ":", 3)
					if len(parts) == 3 && strings.Contains(","+parts[1]+",", ","+ctl+",") && strings.Contains(parts[2], "oz0-demo-exec-") {
						ok = true
					}
				}
				if !ok {
					return fmt.Errorf("not in the sandbox's %s cgroup:\n%s", ctl, b)
				}
			}
			return nil
		}
		if err := inGroups(tool); err != nil {
			t.Errorf("the tool: %v", err)
		}
		if !viaCmd {
			// Started from inside its groups, bwrap itself is born there too.
			if err := inGroups(runner); err != nil {
				t.Errorf("bwrap: %v", err)
			}
		}
		st.stop()
	})
}

// Starting a sandbox from inside its cgroup moves one thread of the node in and
// out: afterwards no thread of the node is in a sandbox's group, so the node's
// own work is never held to a plugin's limits, and Cleanup removes the groups.
func TestSandboxStartLeavesNoNodeThreadInItsCgroup(t *testing.T) {
	b := backendFor(t, policy.BackendBwrap)
	n := newTestNode(t, b, "demo")
	for range 5 {
		if r := n.sh("demo", "true"); r.code != 0 {
			t.Fatal(r)
		}
	}
	st := n.startVia(n.spec("demo", "/bin/sh", "-c", "echo ready; exec sleep 60"), false)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
		if err != nil {
			continue // the thread ended
		}
		if strings.Contains(string(b), "/oz0-") {
			t.Errorf("node thread %s is in a sandbox's cgroup:\n%s", task.Name(), b)
		}
	}
	st.stop()
}

// A cgroup holding a thread of the node (one that entered to start a sandbox and
// could not leave) is never cleaned up by killing its processes: that would kill
// the node.
func TestCgroupDestroySparesTheNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: creating cgroups needs root")
	}
	cg, err := newCgroup("destroy-spares-node", sandbox.Limits{Pids: 64})
	if err != nil {
		t.Skipf("not tested: no cgroup here: %v", err)
	}
	if !cg.threadStart() {
		cg.destroy()
		t.Skip("not tested: cgroup v2 starts no sandbox from a thread inside")
	}
	entered, left := make(chan error), make(chan struct{})
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		err := cg.enterThread()
		entered <- err
		<-left
		done <- cg.leaveThread()
		runtime.UnlockOSThread()
	}()
	if err := <-entered; err != nil {
		close(left)
		<-done
		t.Fatal(err)
	}
	// destroy gives up after its 5 s with the group still busy, and the test
	// process is still alive to see it.
	if err := cg.destroy(); err == nil {
		t.Error("destroy removed a group that holds a live thread")
	}
	close(left)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := cg.destroy(); err != nil {
		t.Errorf("destroy after the thread left: %v", err)
	}
}

// gVisor: a fresh bundle per start, and on stop the bundle, the container's state
// and its cgroup are gone.
func TestGVisorBundleAndStateRemovedOnStop(t *testing.T) {
	b := backendFor(t, policy.BackendGVisor)
	n := newTestNode(t, b, "demo")
	st := n.start(n.spec("demo", "/bin/sh", "-c", "echo ready; exec sleep 60"))
	bundles := filepath.Join(n.dir.Run(), "runsc-bundles")
	ents, _ := os.ReadDir(bundles)
	if len(ents) != 1 {
		t.Fatalf("%d bundles while one sandbox runs, want 1", len(ents))
	}
	id := ents[0].Name()
	if cfg, err := os.Stat(filepath.Join(bundles, id, "config.json")); err != nil || cfg.Mode().Perm() != 0o600 {
		t.Errorf("config.json (holds the tool's environment) must be private: %v %v", cfg.Mode(), err)
	}
	state := filepath.Join(n.dir.Run(), "runsc")
	path := b.(*GVisor).Path
	if out, _ := exec.Command(path, "--root", state, "list", "-quiet").CombinedOutput(); !strings.Contains(string(out), id) {
		t.Fatalf("runsc list does not show %s: %q", id, out)
	}
	own, _ := ownCgroups()
	pidsCg := filepath.Join("/sys/fs/cgroup/pids", own["pids"], id)
	if _, err := os.Stat(pidsCg); err != nil {
		t.Errorf("runsc did not put the sandbox in its own pids cgroup %s: %v", pidsCg, err)
	}
	st.stop()
	if ents, _ := os.ReadDir(bundles); len(ents) != 0 {
		t.Errorf("bundles left after stop: %v", ents)
	}
	if out, err := exec.Command(path, "--root", state, "list", "-quiet").Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("runsc list after stop: %q, %v; want no containers", out, err)
	}
	if _, err := os.Stat(pidsCg); err == nil {
		t.Errorf("the sandbox's pids cgroup %s survived the stop", id)
	}
}

// A probe runs a real sandbox, so a runner that starts but does not work is
// reported as not working, never trusted.
func TestProbeReportsBrokenRunners(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	for _, b := range []sandbox.Backend{
		&Bwrap{Path: ""}, &Bwrap{Path: "/bin/true"}, &Bwrap{Path: "/bin/false"},
		&GVisor{Path: ""}, &GVisor{Path: "/bin/true"}, &GVisor{Path: "/bin/false"},
	} {
		pr := b.Probe(ctx)
		if pr.Works || pr.Err == nil || !errors.Is(pr.Err, sandbox.ErrUnavailable) {
			t.Errorf("%s probe with a broken runner: works=%v err=%v, want not working with ErrUnavailable", b.Name(), pr.Works, pr.Err)
		}
	}
}

// gVisor: a sandbox whose tool ends by itself (leaving a child behind) is gone
// after Cleanup just as a stopped one is, though Cleanup runs no runsc delete
// then: no container, state file, runsc process, bundle or cgroup of it is left.
func TestGVisorNothingLeftAfterToolExits(t *testing.T) {
	b := backendFor(t, policy.BackendGVisor)
	n := newTestNode(t, b, "demo")
	p, err := b.Command(context.Background(), n.spec("demo", "/bin/sh", "-c", "sleep 60 & echo started"))
	if err != nil {
		t.Fatal(err)
	}
	id := p.Cmd.Args[len(p.Cmd.Args)-1]
	var out bytes.Buffer
	p.Cmd.Stdout = &out
	if err := p.Cmd.Run(); err != nil || !strings.Contains(out.String(), "started") {
		p.Cleanup()
		t.Fatalf("run: %v, out %q", err, out.String())
	}
	if err := p.Cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	state := filepath.Join(n.dir.Run(), "runsc")
	if out, err := exec.Command(b.(*GVisor).Path, "--root", state, "list", "-quiet").Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("runsc list after the tool exited: %q, %v; want no containers", out, err)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "*"+id+"*")); len(left) > 0 {
		t.Errorf("runsc state of %s left: %v", id, left)
	}
	if _, err := os.Stat(filepath.Join(n.dir.Run(), "runsc-bundles", id)); err == nil {
		t.Errorf("bundle %s left", id)
	}
	own, _ := ownCgroups()
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", own["pids"], id)); err == nil {
		t.Errorf("the sandbox's pids cgroup %s survived", id)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		if b, err := os.ReadFile(c); err == nil && bytes.Contains(b, []byte(id)) {
			t.Errorf("a process of the sandbox is still running: %s: %q", c, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

// Sandboxes started at once each get a group of their own directly under the
// node's, never one nested in another's: a thread of the node inside a sandbox's
// group to start it (the main thread among them) is not where the node's own
// groups are read from.
func TestConcurrentStartsDoNotNestCgroups(t *testing.T) {
	b := backendFor(t, policy.BackendBwrap)
	n := newTestNode(t, b, "demo")
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				p, err := b.Command(context.Background(), n.spec("demo", "/bin/true"))
				if err != nil {
					errs <- err
					return
				}
				if err := p.Start(); err != nil {
					p.Cleanup()
					errs <- err
					return
				}
				cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.Cmd.Process.Pid))
				p.Cmd.Wait()
				if err := p.Cleanup(); err != nil {
					errs <- fmt.Errorf("cleanup: %w", err)
				}
				for _, l := range strings.Split(string(cg), "\n") {
					parts := strings.SplitN(l, ":", 3)
					if len(parts) != 3 || parts[1] != "pids" {
						continue
					}
					if rest, ok := strings.CutPrefix(parts[2], strings.TrimSuffix(own["pids"], "/")+"/"); !ok || strings.Contains(rest, "/") {
						errs <- fmt.Errorf("a sandbox's pids group %s is not directly under the node's %s", parts[2], own["pids"])
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
