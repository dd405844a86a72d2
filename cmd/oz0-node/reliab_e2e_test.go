package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// Reliability under misbehaving servers: the unruly fixture's server has a tool
// that never answers and one that floods stderr.

// serverPIDs lists the host pids of the unruly fixture's server: its python under
// bwrap, its runsc processes under gVisor (the python runs inside the sentry).
func serverPIDs(data string) []string {
	var out []string
	for _, p := range append(processesMentioning("echo,hang,spew"), processesMentioning(data+"/run/runsc-bundles/oz0-")...) {
		// This node's servers only: other tests (and other packages' tests, run
		// side by side) start the same fixture.
		if !strings.Contains(p, data+"/") {
			continue
		}
		pid, _, _ := strings.Cut(p, ":")
		out = append(out, pid)
	}
	return out
}

// alive says whether a process exists and is not a zombie.
func alive(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || syscall.Kill(n, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestE2ERestartWithACallInFlight(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"unruly"}, "--backend", backend)
			n.waitState("unruly", "main", api.StateRunning)
			if out, err := n.oz("call", "unruly__echo", "--arg", "text=up"); err != nil {
				t.Fatalf("echo: %v %s", err, out)
			}
			old := serverPIDs(n.data)
			if len(old) == 0 {
				t.Fatal("no process of the unruly server found")
			}
			// A call that never answers, in flight.
			hang := exec.Command(n.bin, "--data-dir", n.data, "call", "unruly__hang", "--timeout", "5m")
			var hangOut strings.Builder
			hang.Stdout, hang.Stderr = &hangOut, &hangOut
			if err := hang.Start(); err != nil {
				t.Fatal(err)
			}
			hangDone := make(chan error, 1)
			go func() { hangDone <- hang.Wait() }()
			t.Cleanup(func() { hang.Process.Kill() })
			time.Sleep(1500 * time.Millisecond) // the call reaches the server
			// A second call too big for the pipe of a server that no longer reads
			// its input: the node's write of it blocks.
			big := exec.Command(n.bin, "--data-dir", n.data, "call", "unruly__echo", "--arg", "text="+strings.Repeat("b", 120<<10), "--timeout", "5m")
			var bigOut strings.Builder
			big.Stdout, big.Stderr = &bigOut, &bigOut
			if err := big.Start(); err != nil {
				t.Fatal(err)
			}
			bigDone := make(chan error, 1)
			go func() { bigDone <- big.Wait() }()
			t.Cleanup(func() { big.Process.Kill() })
			time.Sleep(500 * time.Millisecond)

			d, _ := datadir.New(n.data)
			began := time.Now()
			if err := api.NewClient(d.Control()).Restart(context.Background(), "unruly", "main"); err != nil {
				t.Fatal(err)
			}
			// While the old instance stops, status does not say running.
			if st := n.serverState("unruly", "main"); st == api.StateRunning {
				t.Errorf("status says %s while the old instance is being stopped", st)
			}
			// The call in flight ends with a clear error.
			select {
			case err := <-hangDone:
				if err == nil || !strings.Contains(hangOut.String(), "restarted by the operator") {
					t.Errorf("the call in flight ended with err %v, output %q; want an error naming the restart", err, hangOut.String())
				}
				t.Logf("call in flight answered %.1fs after the restart: %s", time.Since(began).Seconds(), strings.TrimSpace(hangOut.String()))
			case <-time.After(20 * time.Second):
				t.Fatalf("the call in flight is still waiting 20s after the restart")
			}
			select {
			case err := <-bigDone:
				if err == nil {
					t.Errorf("the blocked call succeeded? %q", bigOut.String())
				}
				t.Logf("blocked call answered: %s", strings.TrimSpace(bigOut.String()))
			case <-time.After(20 * time.Second):
				t.Fatalf("the call whose request could not be written is still waiting 20s after the restart")
			}
			// The server is back, serving, and status says so.
			deadline := time.Now().Add(30 * time.Second)
			for {
				out, err := n.oz("call", "unruly__echo", "--arg", "text=again", "--timeout", "10s")
				if err == nil && strings.TrimSpace(out) == "again" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server does not serve after the restart: %v %s; status %+v", err, out, n.waitState("unruly", "main", api.StateRunning))
				}
				time.Sleep(200 * time.Millisecond)
			}
			s := n.waitState("unruly", "main", api.StateRunning)
			t.Logf("serving again %.1fs after the restart (restarts %d)", time.Since(began).Seconds(), s.Restarts)
			// The operator's restart shows in status: its own count, the reason.
			if s.OperatorRestarts != 1 || !strings.Contains(s.LastRestart, "the operator asked") {
				t.Errorf("status after the operator's restart: operator restarts %d, last restart %q", s.OperatorRestarts, s.LastRestart)
			}
			if out, err := n.oz("status"); err != nil || !strings.Contains(out, "(+1 by the operator)") {
				t.Errorf("oz0-node status does not show the operator's restart: %v\n%s", err, out)
			}
			// The old process is gone.
			for _, pid := range old {
				if alive(pid) {
					t.Errorf("the old server process %s still runs after the restart", pid)
				}
			}
			if len(serverPIDs(n.data)) == 0 {
				t.Errorf("no server process after the restart")
			}
		})
	}
}

func (n *e2eNode) serverState(plugin, server string) string {
	for _, p := range n.status().Plugins {
		for _, s := range p.Servers {
			if p.Name == plugin && s.Name == server {
				return s.State
			}
		}
	}
	return ""
}

// logBytes sums the sizes of a server's log files (rotated ones included).
func logBytes(t *testing.T, data, plugin, server string) (int64, int) {
	d, _ := datadir.New(data)
	files, _ := filepath.Glob(filepath.Join(d.Logs(), plugin+"."+server+".log*"))
	var total int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			total += fi.Size()
		}
	}
	return total, len(files)
}

func TestE2EStderrFloodKeepsTheLogBounded(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"unruly"}, "--backend", backends[0])
	n.waitState("unruly", "main", api.StateRunning)
	const mib = 256
	began := time.Now()
	if out, err := n.oz("call", "unruly__spew", "--arg", fmt.Sprintf("mib=%d", mib), "--timeout", "2m"); err != nil {
		t.Fatalf("spew: %v %s", err, out)
	}
	took := time.Since(began)
	// The output is read as the server writes it; give the last bytes a moment.
	var size int64
	var files int
	var s api.Server
	deadline := time.Now().Add(10 * time.Second)
	for {
		size, files = logBytes(t, n.data, "unruly", "main")
		s = n.waitState("unruly", "main", api.StateRunning)
		if s.LogDropped > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a call wrote %d MiB of stderr in %.1fs: %d log files, %d bytes on disk, %d bytes dropped", mib, took.Seconds(), files, size, s.LogDropped)
	if size > 16<<20 {
		t.Errorf("the log holds %d bytes after a %d MiB flood: want at most 16 MiB (4 files of 4 MiB)", size, mib)
	}
	if s.LogDropped < (mib-16)<<20 {
		t.Errorf("status reports %d bytes dropped; want about %d MiB", s.LogDropped, mib)
	}
	fout, _ := n.oz("findings")
	if !strings.Contains(fout, api.CodeLogFlood) || !strings.Contains(fout, "unruly/main") {
		t.Errorf("no log-flood finding:\n%s", fout)
	}
	// The server still serves and its log still takes lines after the flood.
	if out, err := n.oz("call", "unruly__echo", "--arg", "text=after"); err != nil || strings.TrimSpace(out) != "after" {
		t.Errorf("echo after the flood: %v %q", err, out)
	}
}

func TestE2EStdioBridgeAnswersAMalformedLineAndGoesOn(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"unruly"}, "--backend", backends[0])
	n.waitState("unruly", "main", api.StateRunning)
	cmd := exec.Command(n.bin, "--data-dir", n.data, "mcp")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { in.Close(); cmd.Process.Kill() }()
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(outPipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the bridge ended its output (exit: %v)", what, <-exited)
			}
			return m
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no answer within 15s", what)
		}
		return nil
	}
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(in, s+"\n"); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if m := next("initialize"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	errorCode := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	send(`{this is not json`)
	if m := next("malformed line"); errorCode(m) != -32700 || m["id"] != nil {
		t.Errorf("a malformed line answered %v, want a -32700 parse error with id null", m)
	}
	send(`{"jsonrpc":"2.0","id":7,"method":5}`)
	if m := next("not a message"); errorCode(m) != -32600 || m["id"] != float64(7) {
		t.Errorf("JSON that is no message answered %v, want -32600 with id 7", m)
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"unruly__echo","arguments":{"text":"still here"}}}`)
	m := next("a call after the bad lines")
	if b, _ := json.Marshal(m); m["id"] != float64(2) || !strings.Contains(string(b), "still here") {
		t.Errorf("the call after the bad lines answered %s", b)
	}
	// End of input is a clean end.
	in.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the bridge ended with %v at end of input", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the bridge did not end at end of input")
	}
}

func TestE2EHealthSaysStoppedAfterTheNodeEnds(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"unruly"}, "--backend", backends[0])
	n.waitState("unruly", "main", api.StateRunning)
	d, _ := datadir.New(n.data)
	readHealth := func() api.Health {
		t.Helper()
		var h api.Health
		b, err := os.ReadFile(d.Health())
		if err == nil {
			err = json.Unmarshal(b, &h)
		}
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := readHealth(); h.Status == api.HealthStopped || h.PID != n.cmd.Process.Pid {
		t.Fatalf("health.json of the running node: %+v", h)
	}
	// A clean exit writes stopped.
	n.stop()
	if h := readHealth(); h.Status != api.HealthStopped || h.Running != 0 {
		t.Errorf("health.json after a clean exit: %+v, want status stopped and nothing running", h)
	}
	if out, err := n.oz("status"); err == nil || !strings.Contains(out, "health.json: stopped") {
		t.Errorf("status after a clean exit: %v %q", err, out)
	}
	// A node killed cannot write; readers take its dead pid for stopped.
	n.start("--backend", backends[0])
	n.waitState("unruly", "main", api.StateRunning)
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
	if h := readHealth(); h.Status == api.HealthStopped {
		t.Fatalf("a killed node wrote stopped? %+v", h)
	}
	out, err := n.oz("status")
	if err == nil || !strings.Contains(out, "health.json: stopped") || !strings.Contains(out, "no longer runs") {
		t.Errorf("status after kill -9: %v %q, want the dead pid read as stopped", err, out)
	}
}

// churnProbe runs in a sandbox: it asks the node's proxy for a URL every few
// milliseconds, says "ready" once allowed, and prints the wall-clock time of the
// first refusal (403).
const churnProbe = `
import socket, sys, time
url, limit = sys.argv[1], time.time() + 20
ready = False
while time.time() < limit:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % url).encode())
    line = s.recv(200).split(b"\r\n")[0]
    s.close()
    if b" 403 " in line:
        print("%.6f" % time.time(), flush=True)
        sys.exit(0)
    if not ready:
        print("ready", flush=True)
        ready = True
    time.sleep(0.002)
print("never", flush=True)
sys.exit(1)
`

// A host taken off a tenant list that is being rewritten every millisecond is
// refused to a sandboxed client within 100 ms of the first write.
func TestE2ETenantChurnReachesTheSandboxWithin100ms(t *testing.T) {
	backends := backendsForE2E(t)
	e := newEgressEnv(t, backends[0])
	url := "http://allowed.test:" + strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port) + "/"
	probe := exec.Command(e.bin, "--data-dir", e.data, "exec", "egress-demo", "--backend", e.backend, "--", "python3", "-c", churnProbe, url)
	out, err := probe.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var probeErr strings.Builder
	probe.Stderr = &probeErr
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	defer probe.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		probe.Wait()
		t.Fatalf("the probe never reached %s: %q %s", url, lines.Text(), probeErr.String())
	}
	list := filepath.Join(e.data, "tenant", "egress")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	began := time.Now()
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			tmp := list + ".churn"
			os.WriteFile(tmp, fmt.Appendf(nil, "# rewrite %d\ntenant-only.test\n", i), 0o644)
			os.Rename(tmp, list)
			select {
			case <-stop:
				return
			default:
				time.Sleep(time.Millisecond)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	if !lines.Scan() {
		t.Fatalf("the probe ended without an answer: %s", probeErr.String())
	}
	sec, err := strconv.ParseFloat(lines.Text(), 64)
	if err != nil {
		t.Fatalf("the probe was never refused: %q %s", lines.Text(), probeErr.String())
	}
	took := time.Unix(0, int64(sec*1e9)).Sub(began)
	t.Logf("refused inside the %s sandbox %v after the first of a write every millisecond", e.backend, took.Round(time.Millisecond))
	if took > 100*time.Millisecond {
		t.Errorf("the removal reached the sandbox after %v under churn, want within 100 ms", took)
	}
}
