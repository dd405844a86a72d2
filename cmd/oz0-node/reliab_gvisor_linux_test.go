package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
)

func nullNetnsMounts(t *testing.T, data string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " "+filepath.Join(data, "run", "runsc", "null-netns")+" ")
}

func TestE2EGVisorLeavesNoNullNetnsMount(t *testing.T) {
	if !slices.Contains(backendsForE2E(t), policy.BackendGVisor) {
		t.Skip("not tested: gVisor (runsc) does not work on this machine")
	}
	n := newE2E(t, []string{"unruly"}, "--backend", policy.BackendGVisor)
	n.waitState("unruly", "main", api.StateRunning)
	if nullNetnsMounts(t, n.data) == 0 {
		t.Fatal("no null-netns mount while a gVisor sandbox runs: the test would prove nothing")
	}
	// A restart (old sandbox ends, new one starts) keeps the new one working.
	d, _ := datadir.New(n.data)
	if err := api.NewClient(d.Control()).Restart(context.Background(), "unruly", "main"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if out, err := n.oz("call", "unruly__echo", "--arg", "text=back", "--timeout", "10s"); err == nil && strings.TrimSpace(out) == "back" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gVisor server does not serve after a restart")
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.stop()
	if c := nullNetnsMounts(t, n.data); c != 0 {
		t.Errorf("%d null-netns mounts left after the node stopped", c)
	}
	// exec of a gVisor sandbox leaves none either.
	if out, err := n.oz("exec", "unruly", "--backend", policy.BackendGVisor, "--", "/bin/true"); err != nil {
		t.Fatalf("exec: %v %s", err, out)
	}
	if c := nullNetnsMounts(t, n.data); c != 0 {
		t.Errorf("%d null-netns mounts left after exec ended", c)
	}
	// A stale one (a killed node's) is swept when a node starts, even one that
	// runs no gVisor sandbox.
	p := filepath.Join(n.data, "run", "runsc", "null-netns")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("/proc/self/ns/net", p, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("make a stale mount: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(p, syscall.MNT_DETACH) })
	n.start("--backend", backendsForE2E(t)[0])
	if c := nullNetnsMounts(t, n.data); c != 0 {
		t.Errorf("%d stale null-netns mounts left after a node started", c)
	}
}

// waitNullNetns waits until a gVisor sandbox has pinned the data folder's null-netns.
func waitNullNetns(t *testing.T, data string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); nullNetnsMounts(t, data) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no null-netns mount while a gVisor sandbox runs: the test would prove nothing")
		}
	}
}

// endWith sends sig to c and waits for it to end.
func endWith(t *testing.T, c *exec.Cmd, sig os.Signal) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	c.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		c.Process.Kill()
		<-done
		t.Fatalf("%v did not end on %v", c.Args, sig)
	}
}

// TestE2EGVisorNullNetnsEndedBySignal: exec ended by SIGHUP (its terminal closed)
// and hook ended by SIGTERM (its caller gave up) unmount the null-netns their
// sandboxes pinned; one left by an exec killed with SIGKILL goes at the next
// exec's start.
func TestE2EGVisorNullNetnsEndedBySignal(t *testing.T) {
	if !slices.Contains(backendsForE2E(t), policy.BackendGVisor) {
		t.Skip("not tested: gVisor (runsc) does not work on this machine")
	}
	bin, data := execNode(t, "unruly", "hook-spy")
	oz := func(args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"--data-dir", data}, args...)...)
		c.Env = os.Environ()
		return c
	}

	t.Run("exec SIGHUP", func(t *testing.T) {
		c := oz("exec", "unruly", "--backend", policy.BackendGVisor, "--", "/bin/sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitNullNetns(t, data)
		time.Sleep(500 * time.Millisecond) // the sandbox's process runs
		endWith(t, c, syscall.SIGHUP)
		if n := nullNetnsMounts(t, data); n != 0 {
			t.Errorf("%d null-netns mounts left after exec ended by SIGHUP", n)
		}
	})

	t.Run("hook SIGTERM", func(t *testing.T) {
		payload, _ := json.Marshal(bashCall("stall-me"))
		c := oz("hook", "--backend", policy.BackendGVisor)
		c.Stdin = bytes.NewReader(payload)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitNullNetns(t, data)
		time.Sleep(2 * time.Second) // the stalling hook's sandbox runs
		endWith(t, c, syscall.SIGTERM)
		if n := nullNetnsMounts(t, data); n != 0 {
			t.Errorf("%d null-netns mounts left after hook ended by SIGTERM", n)
		}
	})

	t.Run("after exec SIGKILL", func(t *testing.T) {
		c := oz("exec", "unruly", "--backend", policy.BackendGVisor, "--", "/bin/sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitNullNetns(t, data)
		endWith(t, c, syscall.SIGKILL)
		if nullNetnsMounts(t, data) == 0 {
			t.Fatal("a SIGKILLed exec left no null-netns mount: the test would prove nothing")
		}
		if out, err := oz("exec", "unruly", "--backend", policy.BackendGVisor, "--", "/bin/true").CombinedOutput(); err != nil {
			t.Fatalf("exec: %v %s", err, out)
		}
		if n := nullNetnsMounts(t, data); n != 0 {
			t.Errorf("%d null-netns mounts left: the next exec's start did not sweep a SIGKILLed one's", n)
		}
	})
}
