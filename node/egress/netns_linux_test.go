package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newNetns starts a process in a new network namespace with loopback up and returns
// the namespace's path and pid; it skips (saying so) where that is not possible.
func newNetns(tb testing.TB) (string, int) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("not root: ListenInNetns (setns into another network namespace) was not tested")
	}
	// The namespace's own process brings its loopback up (a namespace just made by
	// unshare has it down) and says so before it sleeps: deciding from outside when
	// the namespace exists compared it with the test's own, which is not the
	// starting thread's while another test's thread is inside a namespace.
	ns := exec.Command("unshare", "--net", "--", "sh", "-c", "ip link set lo up && echo ready && exec sleep 600")
	out, err := ns.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		tb.Skipf("unshare --net unavailable (%v): ListenInNetns was not tested", err)
	}
	tb.Cleanup(func() { ns.Process.Kill(); ns.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		tb.Skipf("cannot bring up loopback in a new network namespace (unshare said %q): ListenInNetns was not tested", line)
	}
	nsPath := "/proc/" + strconv.Itoa(ns.Process.Pid) + "/ns/net"
	return nsPath, ns.Process.Pid
}

// netnsDialer connects from inside the namespace, as a sandboxed tool would, from
// one thread kept there (so no dial pays for a namespace switch).
func netnsDialer(tb testing.TB, nsPath string) func(addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	reqs := make(chan string)
	res := make(chan result)
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(nsPath)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		ready <- err
		if err != nil {
			return
		}
		for addr := range reqs {
			c, err := net.Dial("tcp", addr)
			res <- result{c, err}
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("enter %s: %v", nsPath, err)
	}
	tb.Cleanup(func() { close(reqs) })
	return func(addr string) (net.Conn, error) {
		reqs <- addr
		r := <-res
		return r.c, r.err
	}
}

// A listener opened in a network namespace that has only loopback serves that
// namespace's processes: a tool inside reaches an allowed host through it, and
// nothing without it.
func TestListenInNetnsServesANamespaceWithOnlyLoopback(t *testing.T) {
	nsPath, pid := newNetns(t)
	self, _ := os.Readlink("/proc/self/ns/net")
	f := newFixture(t, true, nil)
	srv := httptest.NewServer(http.HandlerFunc(hello))
	defer srv.Close()
	ln, err := ListenInNetns(nsPath, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.AddPlugin(PluginRules{Plugin: "gamma", Egress: testManifest}, Listen{Listener: ln}); err != nil {
		t.Fatal(err)
	}
	proxyPort := ln.Addr().(*net.TCPAddr).Port
	if now, _ := os.Readlink("/proc/thread-self/ns/net"); now != self {
		t.Fatalf("this thread was left in %s", now)
	}

	self2, _ := os.Executable()
	run := func(proxy bool) (int, string) {
		cmd := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "--", self2)
		cmd.Env = []string{testToolEnv + "=fetch", "OZ0_TEST_URL=" + hostURL(srv, hostBoth) + "/in-netns"}
		if proxy {
			cmd.Env = append(cmd.Env, "HTTP_PROXY=http://127.0.0.1:"+strconv.Itoa(proxyPort))
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	code, out := run(true)
	if code != 7 || !strings.Contains(out, "status=200 body=hello from "+hostBoth+":"+port(srv)+"/in-netns") {
		t.Fatalf("through the in-namespace listener: exit %d, %q", code, out)
	}
	if code, out := run(false); code == 7 {
		t.Fatalf("the namespace reached the host's loopback without the proxy: %q", out)
	}
	if d := f.p.Recent(1); len(d) != 1 || d[0].Plugin != "gamma" || d[0].Decision != "allow" {
		t.Fatalf("decision %+v", d)
	}
}

// The strict-sandbox path without a bridge: tool in its namespace → listener the
// node opened there → proxy → server. Compare with BenchmarkThroughputCONNECTBridgeUnix.
func BenchmarkThroughputCONNECTNetns(b *testing.B) {
	nsPath, _ := newNetns(b)
	f := benchFixture(b)
	ln, err := ListenInNetns(nsPath, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.p.AddPlugin(PluginRules{Plugin: "gamma", Egress: testManifest}, Listen{Listener: ln}); err != nil {
		b.Fatal(err)
	}
	src := sourceServer(b, benchSize)
	dial := netnsDialer(b, nsPath)
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := dial(ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		drain(b, benchConnect(b, c, fmt.Sprintf("%s:%d", hostBoth, src.Port())), benchSize)
		c.Close()
	}
}

func BenchmarkLatencyCONNECTNetns(b *testing.B) {
	nsPath, _ := newNetns(b)
	f := benchFixture(b)
	ln, err := ListenInNetns(nsPath, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.p.AddPlugin(PluginRules{Plugin: "gamma", Egress: testManifest}, Listen{Listener: ln}); err != nil {
		b.Fatal(err)
	}
	srv := firstByteServer(b)
	dial := netnsDialer(b, nsPath)
	var ds []time.Duration
	one := make([]byte, 1)
	authority := fmt.Sprintf("%s:%d", hostBoth, srv.Port())
	for b.Loop() {
		start := time.Now()
		c, err := dial(ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(benchConnect(b, c, authority), one); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		c.Close()
	}
	reportMedian(b, ds)
}
