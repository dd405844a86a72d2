package backendlinux

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// The "start-node" helper acts as a node starting one sandbox for plugin demo
// (backend, data folder, the step to stop at, the tool's marker): it stops at the
// step (stepHook, or "started" once the start returned) and says so on stdout.
// SIGTERM makes it do what the node's stop does with a start in flight: cancel
// it and clean up the sandbox, then exit.
func init() { reexec.Register("start-node", startNodeMain) }

func startNodeMain(args []string) int {
	if len(args) != 4 {
		return 2
	}
	backend, data, stop, marker := args[0], args[1], args[2], args[3]
	d, _ := datadir.New(data)
	b, err := New(backend)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	n := plan.New(d, config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: b.Name()}, probe.Assume("linux", b.Name(), b.Name() == policy.BackendGVisor), nil)
	n.Limits = testLimits
	p, err := n.One("demo")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, _, err := p.ExecSpec("", []string{"/bin/sleep", marker}, plan.Proxy{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	// The node's stop: the start's context ends; the start returns and its
	// sandbox is cleaned up (node/daemon: launch's error path, the
	// supervisor's stop). A step on the gate's goroutine stays stopped there.
	stepHook = func(step string) {
		if step != stop {
			return
		}
		fmt.Println("paused", step)
		<-ctx.Done()
		if step != stepCgroup {
			select {}
		}
	}
	proc, err := b.Command(ctx, s)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer proc.Cleanup()
	if ctx.Err() != nil {
		return 0
	}
	if err := proc.Start(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("started")
	if stop == "started" {
		fmt.Println("paused started")
	}
	<-ctx.Done()
	return 0
}

// leftovers are what of one helper's sandbox still runs or stays: processes
// whose command line names its marker, and cgroups its tag names.
func leftovers(marker string, helper int, tag string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) || e.Name() == fmt.Sprint(helper) {
			continue
		}
		var pid int
		fmt.Sscan(e.Name(), &pid)
		if running(pid) {
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(b), "\x00", " ")[:min(len(b), 60)])
		}
	}
	mounts, _ := cgroupMounts()
	own, _ := ownCgroups()
	for ctl, m := range mounts {
		ents, _ := os.ReadDir(filepath.Join(m, own[ctl]))
		for _, e := range ents {
			if tag != "" && strings.HasSuffix(e.Name(), "-o"+tag) {
				out = append(out, "cgroup "+ctl+" "+e.Name())
			}
		}
	}
	return out
}

// load keeps the machine's cores busy while a test runs.
func load(t *testing.T) {
	t.Helper()
	for range 3 {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
}

// No sandbox outlives its node, at whatever step of a start the node ends
// (docs/promises.md, "No sandbox outlives its node"): a process acting as the node
// is stopped at each step of a start — cgroup made, bwrap forked (born in its
// cgroup), its report read, its limits set, its gate open — and there stopped
// (SIGTERM: it cleans up as the node's stop does; nothing may be left when it
// has exited) or killed (SIGKILL: nothing runs its cleanup; nothing may be left
// after the next start's sweep). Many times, with the cores kept busy.
func TestNoSandboxOutlivesItsNodeAtAnyStep(t *testing.T) {
	steps := map[string][]string{
		policy.BackendBwrap:    {stepCgroup, stepForked, stepReported, stepLimited, stepGated, "started"},
		policy.BackendLandlock: {stepCgroup, "started"},
		policy.BackendGVisor:   {stepCgroup, "started"},
	}
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		needRoot(t) // plugin users and cgroups: what a root node's sandboxes have
		n := newTestNode(t, b, "demo")
		n.spec("demo", "true") // the home and view exist, as after a start
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		load(t)
		rounds := 3
		if testing.Short() {
			rounds = 1
		}
		for _, step := range steps[b.Name()] {
			for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
				for round := range rounds {
					marker := fmt.Sprintf("36%05d.%d", rand.IntN(100000), round+1)
					node := exec.Command(self, b.Name(), n.dir.Root, step, marker)
					node.Args[0] = reexec.Argv0("start-node")
					node.Env = []string{}
					out, _ := node.StdoutPipe()
					if err := node.Start(); err != nil {
						t.Fatal(err)
					}
					tag := fmt.Sprintf("%d.%d", node.Process.Pid, startTime(node.Process.Pid))
					// Stopped at the step (and, at forked, the start returned:
					// bwrap runs).
					lines := make(chan string, 4)
					go func() {
						sc := bufio.NewScanner(out)
						for sc.Scan() {
							lines <- sc.Text()
						}
						close(lines)
					}()
					want := map[string]bool{"paused " + step: true}
					if step == stepForked {
						want["started"] = true
					}
					for timeout := time.After(30 * time.Second); len(want) > 0; {
						select {
						case l, ok := <-lines:
							if !ok || strings.HasPrefix(l, "error") {
								node.Process.Kill()
								node.Wait()
								t.Fatalf("%s: the helper did not stop at %s: %q", b.Name(), step, l)
							}
							delete(want, l)
						case <-timeout:
							node.Process.Kill()
							node.Wait()
							t.Fatalf("%s: the helper did not stop at %s within 30s", b.Name(), step)
						}
					}
					node.Process.Signal(sig)
					node.Wait()
					if sig == syscall.SIGKILL {
						// The next start's sweep.
						if _, err := Sweep(context.Background(), n.dir.Root, time.Hour); err != nil {
							t.Logf("sweep: %v", err)
						}
					}
					var left []string
					for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
						if left = leftovers(marker, node.Process.Pid, tag); len(left) == 0 || time.Now().After(deadline) {
							break
						}
					}
					if len(left) > 0 {
						t.Errorf("%s, %s at step %s (round %d): left behind: %v", b.Name(), sig, step, round+1, left)
					}
				}
			}
		}
	})
}

// The sweep never touches a sandbox whose owner runs, however young or old: one
// started here (this test process is its owner) still answers after a sweep
// that takes every untagged group of any age.
func TestSweepSparesALiveOwnersSandbox(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		needRoot(t)
		n := newTestNode(t, b, "demo")
		st := n.startVia(n.spec("demo", "/bin/sh", "-c", "echo ready; exec sleep 30"), false)
		if _, err := Sweep(context.Background(), n.dir.Root, 0); err != nil {
			t.Logf("sweep: %v", err)
		}
		if !running(st.p.Cmd.Process.Pid) {
			t.Fatal("the sweep killed a live owner's sandbox")
		}
		select {
		case <-st.done:
			t.Fatal("the sandbox ended after the sweep")
		case <-time.After(200 * time.Millisecond):
		}
	})
}
