package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
