package main

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// stopServer stops (SIGSTOP) every process of the unruly fixture's server, as
// the fault battery froze a server; it returns their pids.
func stopServer(t *testing.T, data string) []string {
	t.Helper()
	pids := serverPIDs(data)
	if len(pids) == 0 {
		t.Fatal("no process of the unruly server found")
	}
	for _, p := range pids {
		n, _ := strconv.Atoi(p)
		syscall.Kill(n, syscall.SIGSTOP)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			n, _ := strconv.Atoi(p)
			syscall.Kill(n, syscall.SIGCONT)
		}
	})
	return pids
}

// findingOf returns the node's finding of code about subject.
func findingOf(st *api.Status, code, subject string) (api.Finding, bool) {
	i := slices.IndexFunc(st.Findings, func(f api.Finding) bool { return f.Code == code && f.Subject == subject })
	if i < 0 {
		return api.Finding{}, false
	}
	return st.Findings[i], true
}

// A server frozen with SIGSTOP is found by the node's liveness check within its
// bound (the ping interval plus the ping's timeout), reported unresponsive (a
// finding, status) and restarted; a call in flight ends with an error naming the
// server and why, and a call that outlives the node's deadline (--call-timeout)
// ends with that reason and has the server checked at once.
func TestE2EFrozenServerIsFoundAndRestarted(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"unruly"}, "--backend", backend,
				"--server-ping-every", "1s", "--server-ping-timeout", "3s", "--call-timeout", "6s")
			n.waitState("unruly", "main", api.StateRunning)
			if out, err := n.oz("call", "unruly__echo", "--arg", "text=up"); err != nil {
				t.Fatalf("echo: %v %s", err, out)
			}

			// Frozen while idle: the next ping goes unanswered.
			old := stopServer(t, n.data)
			began := time.Now()
			time.Sleep(1500 * time.Millisecond) // a ping is in flight now
			call := exec.Command(n.bin, "--data-dir", n.data, "call", "unruly__echo", "--arg", "text=frozen", "--timeout", "1m")
			out, err := call.CombinedOutput()
			took := time.Since(began)
			if err == nil || !strings.Contains(string(out), "unruly/main") || !strings.Contains(string(out), "unresponsive") {
				t.Errorf("a call to the frozen server answered %v %q; want an error naming unruly/main as unresponsive", err, out)
			}
			// The bound: a ping every 1s that gets 3s to answer.
			if took > 1*time.Second+3*time.Second+2*time.Second {
				t.Errorf("the frozen server was found after %s; the bound is 4s", took)
			}
			t.Logf("frozen idle server found after %.1fs; its call answered: %s", took.Seconds(), strings.TrimSpace(string(out)))
			st := n.status()
			f, ok := findingOf(st, api.CodeUnresponsive, "unruly/main")
			if !ok || !strings.Contains(f.Message, "did not answer a ping within 3s") {
				t.Errorf("finding %+v (present %v)", f, ok)
			}
			s := n.waitState("unruly", "main", api.StateRunning)
			if s.Restarts < 1 || !strings.Contains(s.LastRestart, "unresponsive") {
				t.Errorf("after the restart: restarts %d, last restart %q", s.Restarts, s.LastRestart)
			}
			for _, pid := range old {
				if alive(pid) {
					t.Errorf("the frozen server's process %s still runs", pid)
				}
			}
			if out, err := n.oz("call", "unruly__echo", "--arg", "text=back"); err != nil || strings.TrimSpace(out) != "back" {
				t.Fatalf("after the restart: %v %q", err, out)
			}
			if out, err := n.oz("status"); err != nil || !strings.Contains(out, "last restart: unresponsive") {
				t.Errorf("status does not say the last restart was for unresponsiveness: %v\n%s", err, out)
			}

			// Frozen during a call: the call's deadline ends it, naming the
			// server and the deadline, and the server is checked at once.
			restarts := s.Restarts
			slow := exec.Command(n.bin, "--data-dir", n.data, "call", "unruly__big", "--arg", "mib=0", "--arg", "sleep=30", "--timeout", "1m")
			var slowOut strings.Builder
			slow.Stdout, slow.Stderr = &slowOut, &slowOut
			if err := slow.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { slow.Process.Kill() })
			time.Sleep(time.Second)
			stopServer(t, n.data)
			began = time.Now()
			err = slow.Wait()
			ended := time.Since(began)
			if err == nil || !strings.Contains(slowOut.String(), "did not answer within the node's call deadline of 6s") || !strings.Contains(slowOut.String(), "unruly/main") {
				t.Errorf("the call in flight ended with %v %q; want the deadline's reason naming unruly/main", err, slowOut.String())
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				s = n.waitState("unruly", "main", api.StateRunning, api.StateStarting, api.StateUnresponsive, api.StateBackingOff)
				if s.Restarts > restarts && s.State == api.StateRunning {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server frozen during a call was not restarted: %+v", s)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("frozen busy server: its call ended %.1fs after the freeze, the server ran again after %.1fs", ended.Seconds(), time.Since(began).Seconds())
		})
	}
}
