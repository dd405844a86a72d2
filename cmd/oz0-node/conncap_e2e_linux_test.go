package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// holdConnections has another local user (nobody) open n connections to a
// loopback port and hold them; it returns how many it opened.
func holdConnections(t *testing.T, port, n int) int {
	t.Helper()
	script := fmt.Sprintf(`
import socket, sys, time
socks = []
for i in range(%d):
    try:
        socks.append(socket.create_connection(("127.0.0.1", %d), timeout=5))
    except OSError as e:
        break
print(len(socks), flush=True)
time.sleep(120)
`, n, port)
	cmd := exec.Command("/usr/bin/python3", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the flooding client: %v", err)
	}
	opened, _ := strconv.Atoi(strings.TrimSpace(line))
	return opened
}

func openFDs(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// Another local user holding thousands of connections to --mcp-listen and
// --metrics-listen gets its share of the listeners' budget and no more: the
// node stays below its descriptor limit, keeps descriptors for plugin starts
// (a server restarts), and its own user's clients are served.
func TestE2EConnectionFloodStaysUnderTheCaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the flood comes from another user (nobody), which needs root")
	}
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("not tested: prlimit is not installed")
	}
	bin := buildBinary(t)
	mcpPort, metricsPort := freePort(t), freePort(t)
	n := newE2E(t, []string{"demo"}, "--backend", "bwrap")
	n.stop()
	// The node with a descriptor limit of 2000: the listeners share 1000, one
	// peer 250.
	n.cmd = exec.Command("prlimit", "--nofile=2000:2000", "--", bin, "--data-dir", n.data, "run", "--log-format", "text", "--backend", "bwrap",
		"--mcp-listen", "127.0.0.1:"+strconv.Itoa(mcpPort), "--metrics-listen", "127.0.0.1:"+strconv.Itoa(metricsPort))
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)
	d, _ := datadir.New(n.data)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := api.NewClient(d.Control()).Status(t.Context()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node did not come up:\n%s", n.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.waitState("demo", "main", api.StateRunning)
	pid := n.status().Node.PID

	a := holdConnections(t, mcpPort, 1500)
	b := holdConnections(t, metricsPort, 1500)
	time.Sleep(time.Second)
	fds := openFDs(pid)
	t.Logf("nobody opened %d + %d connections; the node holds %d descriptors (limit 2000)", a, b, fds)
	if fds > 1000+250 {
		t.Errorf("the node holds %d descriptors: the flood was not capped (limit 2000, the listeners' share 1000, one peer 250)", fds)
	}

	// The node's own user is served: status, a call over --mcp-listen, and a
	// plugin start (a restart) that needs descriptors.
	if out, err := n.oz("status"); err != nil {
		t.Errorf("status during the flood: %v\n%s", err, out)
	}
	if out, err := n.oz("restart", "demo/main"); err != nil {
		t.Fatalf("restart during the flood: %v %s", err, out)
	}
	time.Sleep(500 * time.Millisecond)
	n.waitState("demo", "main", api.StateRunning)
	if out, err := n.oz("call", "demo__echo", "--arg", "text=served"); err != nil || strings.TrimSpace(out) != "served" {
		t.Errorf("a call during the flood: %v %q", err, out)
	}
	tok, _ := os.ReadFile(d.MetricsToken())
	mf := scrapeWith(t, "", "http://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics", strings.TrimSpace(string(tok)))
	refused := 0.0
	if f := mf["oz0_connections_refused_total"]; f != nil {
		for _, m := range f.Metric {
			refused += m.GetCounter().GetValue()
		}
	}
	if refused == 0 {
		t.Error("no refused connection counted")
	}
	if _, ok := findingOf(n.status(), api.CodeConnectionCap, "mcp-listen"); !ok {
		t.Error("no connection-cap finding for mcp-listen")
	}
	t.Logf("refused %v connections", refused)
}
