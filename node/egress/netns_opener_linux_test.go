package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/reexec"
)

// openerTestHelper runs, as an unprivileged user, what a non-root node does with a
// bwrap sandbox: it starts one the node's way (a user namespace nested in the one
// that owns the network namespace) and opens sockets there through OpenNetns. It
// reports on stdout and waits for the test's word on stdin.
const openerTestHelper = "test-netns-opener"

func init() { reexec.Register(openerTestHelper, openerTestMain) }

func openerTestMain([]string) int {
	say := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	fail := func(f string, a ...any) int { say("fail "+f, a...); return 1 }
	info, iw, err := os.Pipe()
	if err != nil {
		return fail("pipe: %v", err)
	}
	sb := exec.Command("bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
		"--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
		"--info-fd", "3", "--", "sleep", "600")
	sb.ExtraFiles = []*os.File{iw}
	if err := sb.Start(); err != nil {
		return fail("bwrap: %v", err)
	}
	iw.Close()
	defer func() { sb.Process.Kill(); sb.Wait() }()
	var rep struct {
		Pid int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&rep); err != nil {
		return fail("bwrap info: %v", err)
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", rep.Pid)
	start := time.Now()
	n, err := OpenNetns(nsPath)
	if err != nil {
		return fail("OpenNetns: %v", err)
	}
	started := time.Since(start)
	if n.h == nil {
		return fail("OpenNetns as uid %d started no helper", os.Geteuid())
	}
	start = time.Now()
	ln, err := n.Listen("127.0.0.1:443") // a port only a privileged socket may take
	if err != nil {
		return fail("tcp: %v", err)
	}
	say("timing: helper started in %v, a listener opened through it in %v", started, time.Since(start))
	pc, err := n.ListenPacket("127.0.0.53:53")
	if err != nil {
		return fail("udp: %v", err)
	}
	var want unix.Stat_t
	if err := unix.Stat(nsPath, &want); err != nil {
		return fail("stat: %v", err)
	}
	for name, c := range map[string]syscall.Conn{"tcp": ln.(syscall.Conn), "udp": pc.(syscall.Conn)} {
		rc, _ := c.SyscallConn()
		var got unix.Stat_t
		var serr error
		rc.Control(func(fd uintptr) {
			nsfd, err := unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
			if err != nil {
				serr = err
				return
			}
			defer unix.Close(nsfd)
			serr = unix.Fstat(nsfd, &got)
		})
		if serr != nil || got.Ino != want.Ino || got.Dev != want.Dev {
			return fail("%s socket is not in the sandbox's namespace (%v)", name, serr)
		}
		say("%s in sandbox netns", name)
	}
	if _, err := n.Listen("127.0.0.1:443"); err != nil {
		say("taken: %v", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "accepted by the node\n")
			c.Close()
		}
	}()
	helper := n.h.cmd.Process.Pid
	say("ready %d %d", rep.Pid, helper)
	in := bufio.NewScanner(os.Stdin)
	in.Scan() // "close"
	n.Close()
	if err := unix.Kill(helper, 0); err == unix.ESRCH {
		say("helper gone")
	}
	// A second opener the process never closes: it must end with the process.
	n2, err := OpenNetns(nsPath)
	if err != nil {
		return fail("second OpenNetns: %v", err)
	}
	say("orphan %d", n2.h.cmd.Process.Pid)
	return 0
}

// A non-root node opens sockets in a bwrap sandbox's network namespace through
// its helper: they are in that namespace (a privileged port too), the node accepts
// on them, the helper reports errors, sits outside the sandbox's pid and mount
// namespaces, and ends when closed or when the node does.
func TestNetnsOpenerAsAnUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: running the opener as another, unprivileged user needs root to switch to it")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("not tested: bwrap not found")
	}
	if !NsenterAvailable() {
		t.Skip("not tested: nsenter not found")
	}
	// The test binary, where the unprivileged user can execute it.
	dir, err := os.MkdirTemp("", "oz0-opener-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	bin := filepath.Join(dir, "egress.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Args[0] = reexec.Argv0(openerTestHelper)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the unprivileged side ended early: %s", stderr.String())
		}
		l := lines.Text()
		if strings.HasPrefix(l, "fail ") {
			t.Fatalf("%s (stderr: %s)", l, stderr.String())
		}
		return l
	}
	got := map[string]bool{}
	var sandboxPid, helper int
	for {
		l := next()
		if _, err := fmt.Sscanf(l, "ready %d %d", &sandboxPid, &helper); err == nil {
			break
		}
		got[l] = true
		if strings.HasPrefix(l, "timing: ") {
			t.Log(l)
		}
		if strings.HasPrefix(l, "taken: ") {
			got["taken"] = strings.Contains(l, "address already in use")
		}
	}
	for _, w := range []string{"tcp in sandbox netns", "udp in sandbox netns", "taken"} {
		if !got[w] {
			t.Errorf("missing %q (got %v)", w, got)
		}
	}
	// The node accepts on the listener; the sandbox's side connects.
	nsPath := fmt.Sprintf("/proc/%d/ns/net", sandboxPid)
	c, err := netnsDialer(t, nsPath)("127.0.0.1:443")
	if err != nil {
		t.Fatalf("connect in the sandbox: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "accepted by the node\n" {
		t.Errorf("from the listener: %q", b)
	}
	// The helper is in the namespaces of the node, not of the sandbox.
	for _, ns := range []string{"pid", "mnt"} {
		h, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", helper, ns))
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		sb, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", sandboxPid, ns))
		if h == "" || h != mine || h == sb {
			t.Errorf("helper's %s namespace %q; the node's %q, the sandbox's %q", ns, h, mine, sb)
		}
	}
	if h, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", helper)); h == "" || h != mustReadlink(t, nsPath) {
		t.Errorf("helper's network namespace %q is not the sandbox's", h)
	}
	io.WriteString(stdin, "close\n")
	if l := next(); l != "helper gone" {
		t.Errorf("after Close: %q, want the helper gone", l)
	}
	var orphan int
	if _, err := fmt.Sscanf(next(), "orphan %d", &orphan); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(orphan, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("helper %d outlived its node", orphan)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustReadlink(t *testing.T, p string) string {
	t.Helper()
	l, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
