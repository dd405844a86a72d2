package backendlinux

// The escape battery: each test names the promise it proves (docs/promises.md §3, §7,
// §8) and runs it under every Linux backend that works here, on a root node, as
// `oz0-node exec` would: plan.New → node.One → ExecSpec → backend.Command.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

func canary(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	return "oz0-canary-" + hex.EncodeToString(b[:])
}

// mustFail requires a command in the sandbox to fail and its output to hold no secret.
func mustFail(t *testing.T, r result, what, secret string) {
	t.Helper()
	if r.code == 0 {
		t.Errorf("%s: succeeded, want a failure\n%s", what, r)
	}
	if secret != "" && (strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret)) {
		t.Errorf("%s: the secret %q leaked\n%s", what, secret, r)
	}
}

func TestSandboxCannotReadNodeKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		key, err := os.ReadFile(n.dir.Key())
		if err != nil || len(key) == 0 {
			t.Fatalf("node key: %v", err)
		}
		r := n.sh("demo", "cat "+n.dir.Key())
		mustFail(t, r, "cat node.key", string(key[30:60]))
		if r := n.sh("demo", "test -e "+n.dir.Key()); r.code == 0 {
			if b.Name() == policy.BackendLandlock {
				landlockGap(t, "mount-namespace") // its content stays out of reach (above)
			} else {
				t.Errorf("node.key is visible in the sandbox")
			}
		}
	})
}

func TestSandboxCannotReadDataFolder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		c := canary(t)
		for _, p := range []string{filepath.Join(n.dir.TenantDir(), "secret"), filepath.Join(n.dir.Run(), "secret"), filepath.Join(n.dir.Logs(), "secret"), n.dir.Ledger()} {
			if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
			mustFail(t, n.sh("demo", "cat "+p), "read "+p, c)
		}
		// Only the plugin's own folder and home exist under the data folder inside;
		// on the Landlock tier no folder of it may be listed at all.
		r := n.sh("demo", "ls -A "+n.dir.Root+"; ls -A "+n.dir.Plugins()+"; ls -A "+n.dir.Homes())
		want := "homes plugins demo demo"
		if b.Name() == policy.BackendLandlock {
			want = ""
			for _, d := range []string{n.dir.Root, n.dir.Plugins(), n.dir.Homes()} {
				mustFail(t, n.sh("demo", "ls -A "+d), "list "+d, "")
			}
		}
		if got := strings.Fields(r.stdout); strings.Join(got, " ") != want {
			t.Errorf("the sandbox sees %q under the data folder, want %q\n%s", got, want, r)
		}
	})
}

func TestSandboxCannotReadOtherPlugin(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo", "egress-demo")
		other := n.spec("egress-demo", "true") // creates its home
		c := canary(t)
		if err := os.WriteFile(filepath.Join(other.Home, "secret"), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		mustFail(t, n.sh("demo", "cat "+filepath.Join(other.Home, "secret")), "read the other plugin's home", c)
		mustFail(t, n.sh("demo", "cat "+filepath.Join(other.PluginDir, "plugin.json")), "read the other plugin's folder", "Fetches from named hosts")
		mustFail(t, n.sh("demo", "ls "+other.PluginDir), "list the other plugin's folder", "server.py")
		mustFail(t, n.sh("demo", "ls "+filepath.Dir(other.Home)+"/egress-demo"), "list the other plugin's home", "secret")
	})
}

func TestSandboxCannotReadShadow(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		mustFail(t, n.sh("demo", "cat /etc/shadow"), "cat /etc/shadow", "root:")
		if b.Name() == policy.BackendLandlock {
			mustFail(t, n.sh("demo", "cat /etc/passwd"), "cat /etc/passwd (not on the allowlist)", "root:")
		}
	})
}

// A tool looks its own user up in /etc/passwd — Node.js's os.homedir() and
// `id -un` when HOME is unset, as for a server a plugin starts through `env -i`
// (published plugins do) — so a sandbox with a mount namespace answers from the
// node's own file: root, the plugin's user with the plugin's home, nobody. The
// host's users stay unnamed. (Landlock shows host paths only: the host's file
// stays out of reach there, and such a lookup fails.)
func TestSandboxNamesItsOwnUserNotTheHosts(t *testing.T) {
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	var hostOnly []string
	for _, l := range strings.Split(string(host), "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && name != "root" && name != "nobody" {
			hostOnly = append(hostOnly, name+":")
		}
	}
	if len(hostOnly) == 0 {
		t.Fatal("the host's /etc/passwd names no user but root and nobody: nothing to keep out")
	}
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		if b.Name() == policy.BackendLandlock {
			mustFail(t, n.sh("demo", "cat /etc/passwd"), "cat /etc/passwd (not on the allowlist)", "root:")
			return
		}
		s := n.spec("demo", "/bin/sh", "-c", `cat /etc/passwd /etc/group; echo "name=$(env -i /usr/bin/id -un) group=$(env -i /usr/bin/id -gn)"; env -i /usr/bin/node -e 'console.log("home=" + require("os").homedir())'; for f in /etc/passwd /etc/group; do if (echo "evil:x:0:0::/:/bin/sh" >> $f) 2>/dev/null; then echo "WROTE $f"; fi; done`)
		r := n.run(s, "")
		if r.code != 0 {
			t.Fatalf("the user lookup failed in the sandbox:\n%s", r)
		}
		want := "root"
		if s.PluginUser {
			want = sandbox.SandboxUser("demo")
		}
		if !strings.Contains(r.stdout, "name="+want+" group="+want+"\n") {
			t.Errorf("id -un/-gn without HOME: want %s:\n%s", want, r)
		}
		if !strings.Contains(r.stdout, "home="+s.Home+"\n") {
			t.Errorf("os.homedir() without HOME: want the plugin's home %s:\n%s", s.Home, r)
		}
		if strings.Contains(r.stdout, "WROTE") {
			t.Errorf("the tool could append a user to its user database:\n%s", r.stdout)
		}
		for _, u := range hostOnly {
			if strings.Contains(r.stdout, "\n"+u) || strings.HasPrefix(r.stdout, u) {
				t.Errorf("the host's user %s is named in the sandbox:\n%s", strings.TrimSuffix(u, ":"), r.stdout)
			}
		}
	})
}

func TestSandboxCannotReadHostTmp(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		c, content := canary(t), canary(t)
		p := filepath.Join("/tmp", c)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		mustFail(t, n.sh("demo", "cat "+p), "read a host /tmp file", content)
		if r := n.sh("demo", "ls -A /tmp /dev/shm 2>&1"); strings.Contains(r.stdout, c) {
			t.Errorf("host /tmp is visible:\n%s", r)
		}
	})
}

// A plugin writes into its own folder as under Claude Code — but into its view,
// a copy of its installed commit bound at the commit's path: the installed commit
// stays byte for byte as installed, and what the plugin wrote is there at its next
// start (docs/promises.md §12).
func TestSandboxWritesItsViewNeverTheInstalledCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		n.spec("demo", "true")
		commit := n.dir.PluginCommit("demo", testCommit)
		before, err := os.ReadFile(filepath.Join(commit, "server.py"))
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{
			"echo x > $PLUGIN_ROOT/new-file",
			"echo x >> $PLUGIN_ROOT/server.py",
			"mkdir $PLUGIN_ROOT/newdir",
			"rm $PLUGIN_ROOT/plugin.json",
		} {
			if r := n.sh("demo", cmd); r.code != 0 {
				t.Errorf("%s in the plugin's folder: %s", cmd, r)
			}
		}
		// The next start sees what the plugin wrote.
		if r := n.sh("demo", "cat $PLUGIN_ROOT/new-file && test -d $PLUGIN_ROOT/newdir && ! test -e $PLUGIN_ROOT/plugin.json"); r.code != 0 {
			t.Errorf("the plugin's writes did not persist in its view:\n%s", r)
		}
		after, _ := os.ReadFile(filepath.Join(commit, "server.py"))
		if string(before) != string(after) {
			t.Errorf("server.py of the installed commit changed on the host")
		}
		for _, p := range []string{"new-file", "newdir"} {
			if _, err := os.Lstat(filepath.Join(commit, p)); err == nil {
				t.Errorf("%s appeared in the installed commit's folder on the host", p)
			}
		}
		if _, err := os.Stat(filepath.Join(commit, "plugin.json")); err != nil {
			t.Errorf("plugin.json of the installed commit: %v", err)
		}
		view := n.dir.View("demo", testCommit)
		if b, err := os.ReadFile(filepath.Join(view, "new-file")); err != nil || string(b) != "x\n" {
			t.Errorf("the view %s does not hold the write: %q %v", view, b, err)
		}
	})
}

func TestSandboxHomeWritableAndPersistent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		c := canary(t)
		if r := n.sh("demo", "echo "+c+" > $HOME/state && mkdir -p $HOME/sub && echo ok"); r.code != 0 {
			t.Fatalf("write the home: %s", r)
		}
		if r := n.sh("demo", "cat $HOME/state"); r.code != 0 || strings.TrimSpace(r.stdout) != c {
			t.Errorf("the home did not persist across starts: %s", r)
		}
		s := n.spec("demo", "true")
		fi, err := os.Stat(filepath.Join(s.Home, "state"))
		if err != nil {
			t.Fatalf("state is not in the home on the host: %v", err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != nodeUID("demo") {
			t.Errorf("state is owned by uid %d on the host, want the plugin's %d", uid, nodeUID("demo"))
		}
	})
}

func TestSandboxSeesNoHostProcess(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		if b.Name() == policy.BackendLandlock {
			landlockSeesHostProcesses(t, n)
			return
		}
		r := n.py("demo", `import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
cmds = [open("/proc/%d/cmdline" % p, "rb").read().replace(b"\0", b" ").decode() for p in pids if os.path.exists("/proc/%d/cmdline" % p)]
print(len(pids)); print("\n".join(cmds))`)
		if r.code != 0 {
			t.Fatal(r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		count, _ := strconv.Atoi(lines[0])
		if count == 0 || count > 3 {
			t.Errorf("the sandbox sees %d processes, want only its own (≤ 3)\n%s", count, r)
		}
		host, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", os.Getpid()))
		self := strings.ReplaceAll(string(host), "\x00", " ")
		for _, l := range lines[1:] {
			if strings.Contains(l, self) || strings.Contains(l, "go test") || strings.Contains(l, ".test") {
				t.Errorf("the sandbox sees a host process: %q", l)
			}
		}
	})
}

// landlockSeesHostProcesses: without a PID namespace the tool sees the host's
// processes (a documented gap), but reaches none outside its sandbox: not the
// node's environment, descriptors or memory, not a signal to it, of whichever
// user the node is.
func landlockSeesHostProcesses(t *testing.T, n *testNode) {
	t.Helper()
	node := os.Getpid()
	r := n.py("demo", fmt.Sprintf(`import os, signal
node = %d
print("sees node", os.path.exists("/proc/%%d" %% node))
for what in ("environ", "mem", "maps"):
    try: open("/proc/%%d/%%s" %% (node, what), "rb").read(64); print(what, "READ")
    except OSError as e: print(what, "refused", e.errno)
for fd in (0, 1, 2):
    try: os.readlink("/proc/%%d/fd/%%d" %% (node, fd)); print("fd READ")
    except OSError as e: print("fd refused", e.errno)
    try: open("/proc/%%d/fd/%%d" %% (node, fd), "rb").close(); print("fd OPENED")
    except OSError as e: print("fd open refused", e.errno)
try: os.kill(node, 0); print("signal REACHED")
except OSError as e: print("signal refused", e.errno)
try: os.kill(1, 0); print("signal to init REACHED")
except OSError as e: print("signal to init refused", e.errno)
try: signal.pidfd_send_signal(os.pidfd_open(node), 0); print("pidfd signal REACHED")
except OSError as e: print("pidfd signal refused", e.errno)`, node))
	if r.code != 0 {
		t.Fatal(r)
	}
	if !strings.Contains(r.stdout, "sees node True") {
		t.Errorf("the tool does not see the node in /proc: the gap this case documents is gone; update docs/promises.md\n%s", r)
	} else {
		landlockGap(t, "pid-namespace")
	}
	for _, want := range []string{"environ refused", "mem refused", "maps refused", "fd refused", "fd open refused", "signal refused", "signal to init refused", "pidfd signal refused"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q: a process outside the sandbox was reached\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "READ") || strings.Contains(r.stdout, "OPENED") || strings.Contains(r.stdout, "REACHED") {
		t.Errorf("a process outside the sandbox was reached:\n%s", r)
	}
}

// envPlugin is a plugin whose manifest gives its server LD_PRELOAD and variables,
// one of them full of shell syntax that must arrive verbatim.
func envPlugin(n *testNode) {
	n.installPlugin("envtest", map[string]string{
		"plugin.json": `{"name": "envtest", "version": "1.0.0", "extensions": {"ai.oz0": {"namespace": "dev.oz0-tests"}}}`,
		".mcp.json": `{"mcpServers": {"main": {"command": "python3", "args": ["-c", "pass"],
			"env": {"LD_PRELOAD": "/nonexistent/oz0-preload.so", "MANIFEST_VAR": "from-manifest",
				"QUOTED_VAR": "it's $(echo no) ` + "`echo no`" + ` \\ \" ;x"}}}}`,
	})
}

func TestSandboxEnvironmentIsMinimal(t *testing.T) {
	const canaryVar = "OZ0_NODE_CANARY"
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		envPlugin(n)
		c := canary(t)
		t.Setenv(canaryVar, c)
		s := n.spec("envtest", "python3", "-c", `import os, sys
for k in sorted(os.environ): print("ENV", k + "=" + os.environ[k])
for f in ("/proc/1/environ", "/proc/1/cmdline", "/proc/self/cmdline"):
    try: print("FILE", f, open(f, "rb").read().replace(b"\0", b" ").decode())
    except OSError as e: print("FILE", f, "unreadable", e.errno)`)
		r := n.run(s, "")
		if r.code != 0 {
			t.Fatal(r)
		}
		if strings.Contains(r.stdout, c) || strings.Contains(r.stderr, c) {
			t.Errorf("the node's canary variable reached the sandbox\n%s", r)
		}
		var got []string
		for _, l := range strings.Split(r.stdout, "\n") {
			// bwrap sets PWD to the working folder it changed to; nothing else is added.
			kv, ok := strings.CutPrefix(l, "ENV ")
			if !ok || kv == "PWD="+s.Dir {
				continue
			}
			// Landlock's TMPDIR is the private tmp made for the start.
			if tmp, ok := strings.CutPrefix(kv, "TMPDIR="); ok && b.Name() == policy.BackendLandlock {
				if !strings.HasPrefix(tmp, filepath.Join(n.dir.Run(), "tmp")+"/") {
					t.Errorf("TMPDIR %q is not a private tmp below the data folder's run/tmp", tmp)
				}
				kv = "TMPDIR=/tmp"
			}
			got = append(got, kv)
		}
		want := append([]string(nil), s.Env...)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("the tool's environment is not exactly the spec's:\n got %q\nwant %q", got, want)
		}
		if !strings.Contains(r.stdout, "ENV MANIFEST_VAR=from-manifest") || !strings.Contains(r.stdout, "ENV LD_PRELOAD=/nonexistent/oz0-preload.so") {
			t.Errorf("the manifest's env did not reach the tool\n%s", r)
		}
		if !strings.Contains(r.stdout, "ENV QUOTED_VAR=it's $(echo no) `echo no` \\ \" ;x\n") {
			t.Errorf("a value with shell syntax did not arrive verbatim\n%s", r)
		}
	})
}

// hostProcs lists the processes under root (itself included) with their status.
func hostProcs(root int) map[int]string {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], pid)
		}
	}
	out := map[int]string{}
	var walk func(int)
	walk = func(p int) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			return
		}
		out[p] = string(st)
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(root)
	return out
}

func statusField(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// started is a sandbox that runs until stop; it printed "ready" first.
type started struct {
	p    *sandbox.Process
	out  *bufio.Reader
	done chan struct{} // closed when the runner has exited
	once sync.Once
}

func (n *testNode) start(s *sandbox.Spec) *started {
	n.t.Helper()
	return n.startVia(s, true)
}

// startVia is start; viaCmd false starts the sandbox as exec does (Process.Start).
func (n *testNode) startVia(s *sandbox.Spec, viaCmd bool) *started {
	n.t.Helper()
	p, err := n.b.Command(context.Background(), s)
	if err != nil {
		n.t.Fatal(err)
	}
	pr, pw := io.Pipe()
	p.Cmd.Stdout, p.Cmd.Stderr = pw, os.Stderr
	start := p.Start
	if viaCmd {
		start = p.Cmd.Start
	}
	if err := start(); err != nil {
		p.Cleanup()
		n.t.Fatal(err)
	}
	st := &started{p: p, out: bufio.NewReader(pr), done: make(chan struct{})}
	go func() { p.Cmd.Wait(); pw.Close(); close(st.done) }()
	n.t.Cleanup(st.stop)
	line, err := st.out.ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		n.t.Fatalf("sandbox did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, st.out)
	return st
}

// stop ends the sandbox as a supervisor does: kill the runner, wait, Cleanup.
func (st *started) stop() {
	st.once.Do(func() {
		st.p.Cmd.Process.Kill()
		select {
		case <-st.done:
		case <-time.After(10 * time.Second):
		}
		st.p.Cleanup()
	})
}

func (st *started) alive() bool {
	select {
	case <-st.done:
		return false
	default:
		return true
	}
}

func TestSandboxLDPreloadDoesNotReachRunner(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		envPlugin(n)
		st := n.start(n.spec("envtest", "/bin/sh", "-c", "echo ready; exec sleep 60"))
		self, _ := os.Executable() // the Landlock runner is the node's binary, here the test's
		// The tool prints "ready" just before it execs sleep; while that exec runs
		// its /proc environ can read empty, so look again until the tree settles.
		var found, tool bool
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			found, tool = false, false
			for pid := range hostProcs(st.p.Cmd.Process.Pid) {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				if err != nil {
					continue
				}
				if filepath.Base(exe) == "bwrap" || filepath.Base(exe) == "runsc" || exe == self {
					found = true
					if strings.Contains(string(env), "LD_PRELOAD") || strings.Contains(string(env), "MANIFEST_VAR") {
						t.Fatalf("runner %s (pid %d) has the manifest's env: %q", exe, pid, env)
					}
					if len(env) != 0 {
						t.Fatalf("runner %s (pid %d) has a non-empty environment: %q", exe, pid, env)
					}
					cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					if strings.Contains(string(cmd), "LD_PRELOAD") || strings.Contains(string(cmd), "from-manifest") {
						t.Fatalf("runner %s (pid %d) shows the manifest's env on its command line (ps): %q", exe, pid, cmd)
					}
				} else if strings.Contains(string(env), "LD_PRELOAD=/nonexistent/oz0-preload.so") {
					tool = true // the tool itself, which must have it
				}
			}
			// gVisor's tool is not a host process: only the runners are seen.
			if found && (tool || b.Name() == policy.BackendGVisor) || time.Now().After(deadline) {
				break
			}
		}
		if !found {
			t.Errorf("found no bwrap/runsc/landlock runner process under pid %d", st.p.Cmd.Process.Pid)
		}
		if b.Name() != policy.BackendGVisor && !tool {
			t.Errorf("the tool process does not have the manifest's LD_PRELOAD")
		}
	})
}

func TestSandboxRunsAsPluginUserWithoutCapabilities(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		uid := nodeUID("demo")
		r := n.sh("demo", "id -u; id -g; id -G; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status")
		if r.code != 0 {
			t.Fatal(r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		want := strconv.FormatUint(uint64(uid), 10)
		if lines[0] != want || lines[1] != want || lines[2] != want {
			t.Errorf("runs as uid %q gid %q groups %q, want %s only", lines[0], lines[1], lines[2], want)
		}
		for _, l := range lines[3:] {
			f := strings.Fields(l)
			switch {
			case len(f) != 2:
				t.Errorf("status line %q", l)
			case f[0] == "NoNewPrivs:" || f[0] == "Seccomp:":
				if b.Name() == policy.BackendLandlock && f[1] != map[string]string{"NoNewPrivs:": "1", "Seccomp:": "2"}[f[0]] {
					t.Errorf("%s, want no_new_privs and a seccomp filter", l)
				}
			case f[0] == "CapBnd:" && b.Name() == policy.BackendLandlock && os.Geteuid() != 0:
				// A non-root runner cannot empty the bounding set; no_new_privs
				// (above) keeps an exec from gaining anything in it.
			case strings.Trim(f[1], "0") != "":
				t.Errorf("capabilities: %q, want none", l)
			}
		}
		if b.Name() == policy.BackendGVisor {
			return // gVisor's processes are not host processes; the sentry runs as nobody
		}
		// Outside the namespaces every process of the sandbox is the plugin's uid
		// (the Landlock runner is the node's, outside the sandbox: its reaper).
		st := n.start(n.spec("demo", "/bin/sh", "-c", "echo ready; exec sleep 60"))
		for pid, status := range hostProcs(st.p.Cmd.Process.Pid) {
			if b.Name() == policy.BackendLandlock && pid == st.p.Cmd.Process.Pid {
				continue
			}
			u, g := statusField(status, "Uid"), statusField(status, "Gid")
			if u != strings.Repeat(want+" ", 3)+want || g != strings.Repeat(want+" ", 3)+want {
				t.Errorf("host pid %d runs as Uid %q Gid %q, want %s", pid, u, g, want)
			}
			if gr := statusField(status, "Groups"); gr != "" {
				t.Errorf("host pid %d has supplementary groups %q", pid, gr)
			}
		}
	})
}

func TestSandboxCannotSignalOtherPlugin(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo", "egress-demo")
		other := n.start(n.spec("egress-demo", "/bin/sh", "-c", "echo ready; exec sleep 60"))
		var victims []int
		for pid := range hostProcs(other.p.Cmd.Process.Pid) {
			victims = append(victims, pid)
		}
		// From inside: the other sandbox's host pids do not exist in this PID namespace.
		var script strings.Builder
		for _, v := range victims {
			fmt.Fprintf(&script, "kill -0 %d 2>/dev/null && echo reached %d; ", v, v)
		}
		script.WriteString("true")
		r := n.sh("demo", script.String())
		if strings.Contains(r.stdout, "reached") {
			t.Errorf("a signal from plugin demo reached the other plugin's sandbox:\n%s", r)
		}
		if !other.alive() {
			t.Errorf("the other plugin's sandbox died")
		}
		if b.Name() == policy.BackendGVisor || os.Geteuid() != 0 {
			return // under gVisor no plugin process is a host process to signal; a non-root node has no plugin users
		}
		// Outside the namespaces too: demo's uid cannot signal egress-demo's processes.
		uid := policy.PluginUID("demo")
		for _, v := range victims {
			err := asUser(uid, uid, func() error { return syscall.Kill(v, 0) })
			if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("host: uid %d signalling pid %d of plugin egress-demo: %v, want EPERM", uid, v, err)
			}
		}
	})
}

func TestSandboxTIOCSTIFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Skipf("no pseudo-terminals here (%v): TIOCSTI not tested", err)
		}
		defer m.Close()
		if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
			t.Fatal(err)
		}
		num, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
		if err != nil {
			t.Fatal(err)
		}
		tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", num), os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer tty.Close()
		s := n.spec("demo", "python3", "-c", `import fcntl, termios, ctypes, os
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"X"); print("TIOCSTI ok")
except OSError as e: print("TIOCSTI refused", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
c = ctypes.c_char(b"Y")
r = libc.syscall(16, 0, ctypes.c_ulong(0x100000000 | termios.TIOCSTI), ctypes.byref(c))
print("TIOCSTI high bits", "ok" if r == 0 else "refused %d" % ctypes.get_errno())`)
		p, err := b.Command(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Cleanup()
		p.Cmd.Stdin = tty
		out, err := p.Cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), "TIOCSTI refused") || !strings.Contains(string(out), "TIOCSTI high bits refused") {
			t.Errorf("TIOCSTI was not refused:\n%s", out)
		}
	})
}

// deniedCalls are x86_64 syscall numbers with arguments that would otherwise run.
var deniedCalls = []struct {
	name string
	nr   int
	args string
}{
	{"ptrace", 101, "16, 1, 0, 0"}, // PTRACE_ATTACH to pid 1
	{"process_vm_readv", 310, "1, 0, 0, 0"},
	{"process_vm_writev", 311, "1, 0, 0, 0"},
	{"keyctl", 250, "0, -3, 0, 0"}, // KEYCTL_GET_KEYRING_ID of the session keyring
	{"add_key", 248, "0, 0, 0, 0"},
	{"request_key", 249, "0, 0, 0, 0"},
	{"io_uring_setup", 425, "1, 0, 0, 0"},
	{"io_uring_enter", 426, "0, 0, 0, 0"},
	{"io_uring_register", 427, "0, 0, 0, 0"},
	{"perf_event_open", 298, "0, 0, -1, -1"},
	{"bpf", 321, "0, 0, 0, 0"},
	{"userfaultfd", 323, "0, 0, 0, 0"},
	{"mount", 165, "0, 0, 0, 0"},
	{"umount2", 166, "0, 0, 0, 0"},
	{"open_tree", 428, "-100, 0, 0, 0"},
	{"move_mount", 429, "0, 0, 0, 0"},
	{"fsopen", 430, "0, 0, 0, 0"},
	{"fsconfig", 431, "0, 0, 0, 0"},
	{"fsmount", 432, "0, 0, 0, 0"},
	{"fspick", 433, "-100, 0, 0, 0"},
	{"mount_setattr", 442, "0, 0, 0, 0"},
	{"setns", 308, "0, 0, 0, 0"},
	{"unshare(CLONE_NEWUSER)", 272, "0x10000000, 0, 0, 0"},
	{"unshare(CLONE_NEWNET)", 272, "0x40000000, 0, 0, 0"},
	{"kexec_load", 246, "0, 0, 0, 0"},
	{"kexec_file_load", 320, "0, 0, 0, 0"},
	{"init_module", 175, "0, 0, 0, 0"},
	{"finit_module", 313, "0, 0, 0, 0"},
	{"delete_module", 176, "0, 0, 0, 0"},
	{"socket(AF_VSOCK)", 41, "40, 1, 0, 0"},
	{"socket(AF_NETLINK)", 41, "16, 3, 0, 0"},
	{"socket(AF_PACKET)", 41, "17, 3, 0, 0"},
	{"clone(CLONE_NEWUSER)", 56, "0x10000000 | 17, 0, 0, 0"},
	{"clone(CLONE_NEWNS)", 56, "0x00020000 | 17, 0, 0, 0"},
}

func TestSandboxDeniedSyscallsRefused(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("syscall numbers are x86_64's; not tested on %s", runtime.GOARCH)
	}
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		var prog strings.Builder
		prog.WriteString("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n")
		prog.WriteString("def call(name, nr, *a):\n    ctypes.set_errno(0)\n    r = libc.syscall(nr, *[ctypes.c_long(x) for x in a])\n    if r == 0 and name.startswith('clone'): os._exit(0)\n    print(name, r, ctypes.get_errno())\n")
		for _, c := range deniedCalls {
			fmt.Fprintf(&prog, "call(%q, %d, %s)\n", c.name, c.nr, c.args)
		}
		prog.WriteString("call('clone3', 435, 0, 0, 0, 0)\n")
		r := n.py("demo", prog.String())
		if r.code != 0 {
			t.Fatal(r)
		}
		got := map[string][2]int{}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			rv, _ := strconv.Atoi(f[1])
			en, _ := strconv.Atoi(f[2])
			got[f[0]] = [2]int{rv, en}
		}
		for _, c := range append(deniedCalls, struct {
			name string
			nr   int
			args string
		}{name: "clone3"}) {
			g, ok := got[c.name]
			switch {
			case !ok:
				t.Errorf("%s: no answer\n%s", c.name, r)
			case g[0] != -1:
				t.Errorf("%s returned %d: it ran", c.name, g[0])
			case b.Name() == policy.BackendBwrap || b.Name() == policy.BackendLandlock:
				want := errEPERM
				if c.name == "clone3" {
					want = errENOSYS // so glibc falls back to clone(2), which the filter can inspect
				} else if strings.HasPrefix(c.name, "socket") {
					want = errEAFNOSUPPORT
				}
				if g[1] != want {
					t.Errorf("%s: errno %d, want %d from the seccomp filter", c.name, g[1], want)
				}
			default:
				// gVisor answers the OCI rules with EPERM and does not implement some
				// calls at all (ENOSYS); clone3 is gVisor's own (EINVAL on these args).
				if g[1] != errEPERM && g[1] != errENOSYS && g[1] != errEAFNOSUPPORT && !(c.name == "clone3" && g[1] == int(syscall.EINVAL)) {
					t.Errorf("%s: errno %d, want EPERM, ENOSYS or EAFNOSUPPORT", c.name, g[1])
				}
			}
		}
	})
}

func TestSandboxNoNetworkButLoopback(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		port := hostLoopbackServer(t)
		abstract := "@" + canary(t)
		uln, err := net.Listen("unix", abstract)
		if err != nil {
			t.Fatal(err)
		}
		defer uln.Close()
		r := n.py("demo", fmt.Sprintf(`import socket
def try_(what, fam, addr):
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
        s.connect(addr); print(what, "REACHED", s.recv(64))
    except OSError as e: print(what, "refused", e)
try_("tcp", socket.AF_INET, ("127.0.0.1", %d))
try_("abstract", socket.AF_UNIX, "\0%s")
try_("internet", socket.AF_INET, ("1.1.1.1", 443))`, port, abstract[1:]))
		if r.code != 0 {
			t.Fatal(r)
		}
		if strings.Contains(r.stdout, "REACHED") {
			t.Errorf("the sandbox reached the host network:\n%s", r)
		}
		for _, want := range []string{"tcp refused", "abstract refused", "internet refused"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("want %q:\n%s", want, r)
			}
		}
	})
}

func TestSandboxNoOtherDescriptors(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		// A descriptor the node holds without close-on-exec, as one inherited from
		// its own parent would be.
		fd, err := syscall.Open(n.dir.Key(), syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		r := n.py("demo", `import os; print(sorted(int(f) for f in os.listdir("/proc/self/fd")))`)
		if r.code != 0 {
			t.Fatal(r)
		}
		// 0-2 plus the descriptor listdir itself holds.
		if got := strings.TrimSpace(r.stdout); got != "[0, 1, 2, 3]" {
			t.Errorf("the tool holds descriptors %s, want only stdio (and listdir's own)", got)
		}
	})
}

// A bind source reached through a symlink anywhere on its path is refused at start:
// what is bound is what was checked (bwrap before 0.12 follows planted symlinks).
func TestSandboxBindSourceThroughSymlinkRefused(t *testing.T) {
	b := backendFor(t, policy.BackendBwrap)
	n := newTestNode(t, b, "demo")
	s := n.spec("demo", "true")
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
		}
	}
	p, err := b.Command(context.Background(), s)
	if err == nil {
		p.Cleanup()
		t.Fatal("a bind source under a symlinked folder was accepted")
	}
	if !errors.Is(err, unix.ELOOP) {
		t.Errorf("err = %v, want ELOOP from the no-symlink open", err)
	}
}

// A tool cannot loosen the modes of the node's files, which would hand the node's
// key or data folder to another local user: under namespaces they are not there;
// on the Landlock tier a per-plugin user does not own them, and a tool running as
// the node's own user is refused chmod and chown by path (seccomp), which
// Landlock does not confine.
func TestSandboxCannotLoosenNodeFileModes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		s := n.spec("demo", "true")
		// The installed commit is the node's; the plugin's view of it is its own.
		targets := []string{n.dir.Key(), n.dir.Root, n.dir.TenantDir(), n.dir.PluginCommit("demo", testCommit)}
		before := map[string]os.FileMode{}
		for _, p := range targets {
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			before[p] = fi.Mode()
		}
		for _, p := range targets {
			// Under namespaces a path on the way to a bind is the sandbox's own
			// folder, which the tool may change: only the host's modes count.
			chmod := n.py("demo", fmt.Sprintf("import os; os.chmod(%q, 0o777)", p))
			chown := n.py("demo", fmt.Sprintf("import os; os.chown(%q, os.getuid(), os.getgid())", p))
			if b.Name() == policy.BackendLandlock {
				mustFail(t, chmod, "chmod 0777 "+p, "")
				mustFail(t, chown, "chown "+p, "")
			}
		}
		for _, p := range targets {
			if fi, err := os.Lstat(p); err != nil || fi.Mode() != before[p] {
				t.Errorf("%s: mode %v after the attempts, was %v (%v)", p, fi.Mode(), before[p], err)
			}
		}
		// A per-plugin user's own files stay its own to change.
		if r := n.sh("demo", "touch $HOME/mine && chmod 700 $HOME/mine"); r.code != 0 && (b.Name() != policy.BackendLandlock || s.PluginUser) {
			t.Errorf("chmod in the home: %s", r)
		}
	})
}

// The host's System V IPC objects are out of reach: a namespace backend has an
// IPC namespace of its own; the Landlock tier refuses the calls.
func TestSandboxNoHostIPC(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		key := int(time.Now().UnixNano()&0x3fffffff) | 1
		id, _, errno := syscall.Syscall(syscall.SYS_SHMGET, uintptr(key), 4096, uintptr(01000|0o666)) // IPC_CREAT, world-readable
		if errno != 0 {
			t.Skipf("no System V shared memory here (%v): not tested", errno)
		}
		defer syscall.Syscall(syscall.SYS_SHMCTL, id, 0 /* IPC_RMID */, 0)
		r := n.py("demo", fmt.Sprintf(`import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.shmget(%d, 0, 0)
print("shmget", r, ctypes.get_errno())`, key))
		if r.code != 0 {
			t.Fatal(r)
		}
		if !strings.HasPrefix(strings.TrimSpace(r.stdout), "shmget -1 ") {
			t.Errorf("the sandbox found the host's shared memory segment:\n%s", r)
		}
		if b.Name() == policy.BackendLandlock && !strings.Contains(r.stdout, "shmget -1 1\n") {
			t.Errorf("Landlock tier: shmget must be refused (EPERM):\n%s", r)
		}
	})
}

// A tool cannot pull a file it may not read into a place it may: neither a hard
// link nor a rename of the node's key into its home works (Landlock refuses a
// link or move across folders without its refer right on both), and nothing of
// the key reaches the tool's output.
func TestSandboxCannotLinkNodeKeyIntoHome(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		key, err := os.ReadFile(n.dir.Key())
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{
			"ln " + n.dir.Key() + " $HOME/key && cat $HOME/key",
			"mv " + n.dir.Key() + " $HOME/key && cat $HOME/key",
			"ln -s " + n.dir.Key() + " $HOME/key-link && cat $HOME/key-link",
		} {
			mustFail(t, n.sh("demo", cmd), cmd, string(key[30:60]))
		}
		if after, err := os.ReadFile(n.dir.Key()); err != nil || string(after) != string(key) {
			t.Errorf("the node key changed or moved: %v", err)
		}
	})
}
