package egress

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A listener opened in a network namespace that has only loopback serves that
// namespace's processes: a tool inside reaches an allowed host through it, and
// nothing without it.
func TestListenInNetnsServesANamespaceWithOnlyLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: ListenInNetns (setns into another network namespace) was not tested")
	}
	ns := exec.Command("unshare", "--net", "--", "sleep", "60")
	if err := ns.Start(); err != nil {
		t.Skipf("unshare --net unavailable (%v): ListenInNetns was not tested", err)
	}
	defer func() { ns.Process.Kill(); ns.Wait() }()
	nsPath := "/proc/" + strconv.Itoa(ns.Process.Pid) + "/ns/net"
	self, _ := os.Readlink("/proc/self/ns/net")
	eventually(t, 5*time.Second, "namespace created", func() bool {
		l, err := os.Readlink(nsPath)
		return err == nil && l != self
	})
	// A namespace just made by unshare has loopback down.
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(ns.Process.Pid), "-n", "--", "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("cannot bring up loopback in the namespace (%v: %s): ListenInNetns was not tested", err, out)
	}

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
		cmd := exec.Command("nsenter", "-t", strconv.Itoa(ns.Process.Pid), "-n", "--", self2)
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
