package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// sandboxesOf lists the running processes of the node's sandboxes on data (their
// command line names the data folder: bwrap, its stuck children, the tools; for
// gVisor its runsc) that do not descend from the process live.
func sandboxesOf(data string, live int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(data+"/")) || !alive(e.Name()) {
			continue
		}
		if live > 0 && descendsFrom(pid, live) {
			continue
		}
		out = append(out, e.Name()+" "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))[:min(len(b), 80)])
	}
	return out
}

// descendsFrom says whether pid has root among its ancestors.
func descendsFrom(pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid == root {
			return true
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return false
}

// The real node, stopped (SIGTERM) and killed (SIGKILL) at random moments while
// many of its servers start — right after it starts them all, and during an
// operator's restart of each — many times, with the cores kept busy: after a stop
// nothing of its sandboxes runs once it has exited; after a kill, nothing of the
// dead node's runs once the next node has started (its sweep).
func TestE2ENodeStoppedOrKilledMidStartLeavesNoSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: plugin users and cgroups need a root node")
	}
	backends := backendsForE2E(t)
	if backendlinux.LandlockABI() >= 1 {
		// No namespace to end with its parent there: the node's own kill and
		// its next start's sweep are all that end a sandbox.
		backends = append(backends, policy.BackendLandlock)
	} else {
		t.Log("not tested on the Landlock tier: this kernel has no Landlock")
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			plugins := []string{"demo", "unruly", "twin-one", "egress-demo", "hook-spy", "writes-own-folder"}
			n := newE2E(t, plugins, "--backend", backend)
			n.waitState("demo", "main", api.StateRunning)
			// The look below must see this backend's sandboxes at all.
			if seen := sandboxesOf(n.data, 0); len(seen) == 0 {
				t.Fatalf("no process of the running node's sandboxes is found on %s: the check below would pass blind", backend)
			}
			for range 3 {
				c := exec.Command("/bin/sh", "-c", "while :; do :; done")
				c.Start()
				t.Cleanup(func() { c.Process.Kill(); c.Wait() })
			}
			rounds := 10
			if testing.Short() {
				rounds = 4
			}
			for round := range rounds {
				sig := syscall.SIGTERM
				if round%2 == 1 {
					sig = syscall.SIGKILL
				}
				pid := n.cmd.Process.Pid
				// Mid-start: within the first moments of a start, or while
				// every server restarts at the operator's word.
				if round%4 < 2 {
					n.stop()
					n.start("--backend", backend)
					pid = n.cmd.Process.Pid
					time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
				} else {
					for _, p := range plugins {
						n.oz("restart", p+"/"+mainServer(p))
					}
					time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
				}
				n.cmd.Process.Signal(sig)
				select {
				case <-n.exited:
				case <-time.After(30 * time.Second):
					t.Fatalf("round %d: the node did not end on %s", round, sig)
				}
				n.cmd = nil
				if sig == syscall.SIGKILL {
					n.start("--backend", backend) // the next start sweeps
				}
				live := 0
				if n.cmd != nil {
					live = n.cmd.Process.Pid
				}
				var left []string
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					if left = sandboxesOf(n.data, live); len(left) == 0 || time.Now().After(deadline) {
						break
					}
				}
				if len(left) > 0 {
					t.Errorf("round %d (%s of node %d): its sandboxes outlived it: %v", round, sig, pid, left)
				}
				if n.cmd == nil {
					n.start("--backend", backend)
				}
			}
		})
	}
}
