package backendlinux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/sandbox"
)

// startInit starts a stand-in for bwrap's init running script, and returns its pid.
func startInit(t *testing.T, script string) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range descendants(cmd.Process.Pid) {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd.Process.Pid
}

func limitLine(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			return strings.Join(strings.Fields(strings.TrimPrefix(l, name)), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/limits", name, pid)
	return ""
}

// The tool's process gets its limits even when /proc does not list it yet the
// first time the node looks. bwrap's init forks it while the node limits init; a
// fork under way at that moment copies init's old rlimits and may not be listed
// yet (seen here as a tool running with none of its rlimits, about one start in
// fifteen under load). Modelled here: the stand-in init's one child exists with
// the old limits, and the first listing misses it.
func TestSandboxLimitsReachAToolProcessListedLate(t *testing.T) {
	init := startInit(t, "sleep 60 & wait")
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(5 * time.Millisecond) {
		if d := descendants(init); len(d) > 0 {
			child = d[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in init started no child")
		}
	}
	looks := 0
	old := descendantsOf
	descendantsOf = func(pid int) []int {
		looks++
		if looks == 1 {
			return nil // the fork is under way: not listed yet
		}
		return old(pid)
	}
	t.Cleanup(func() { descendantsOf = old })

	s := &sandbox.Spec{Plugin: "demo", Limits: sandbox.Limits{OpenFiles: 77, FileSizeBytes: 1 << 20}}
	if err := limitSandbox(init, s, nil); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{init, child} {
		if got := limitLine(t, pid, "Max open files"); got != "77 77 files" {
			t.Errorf("pid %d (init %d): Max open files %q, want 77 77", pid, init, got)
		}
		if got := limitLine(t, pid, "Max file size"); got != "1048576 1048576 bytes" {
			t.Errorf("pid %d (init %d): Max file size %q, want 1048576", pid, init, got)
		}
	}
}

// An init that ends before starting the tool (bwrap failing its setup) is not
// waited for.
func TestSandboxLimitsStopWhenInitEnds(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Wait()
	start := time.Now()
	err := limitSandbox(pid, &sandbox.Spec{Plugin: "demo"}, nil)
	if err == nil {
		t.Fatal("limits of an ended sandbox succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to notice the sandbox ended", took)
	}
	// A zombie init (ended, not yet reaped) is just as gone.
	z := startInit(t, "exit 0")
	for deadline := time.Now().Add(5 * time.Second); running(z); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in init did not end")
		}
	}
	start = time.Now()
	if err := limitSandbox(z, &sandbox.Spec{Plugin: "demo"}, nil); !errors.Is(err, errInitGone) {
		t.Errorf("limits of a zombie init: %v, want errInitGone", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to notice the sandbox ended", took)
	}
}

// bwrap's --info-fd report, in one read or split, gives the sandbox's pid.
func TestReadChildPid(t *testing.T) {
	report := "{\n    \"child-pid\": 10856,\n    \"cgroup-namespace\": 4026532189\n}\n"
	for _, split := range []int{len(report), 20, 1} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for b := []byte(report); len(b) > 0; {
				n := min(split, len(b))
				w.Write(b[:n])
				b = b[n:]
				time.Sleep(time.Millisecond)
			}
			w.Close()
		}()
		pid, err := readChildPid(r)
		r.Close()
		// A split inside the number may yield its first digits only: bwrap writes
		// the report in one write, so only the unsplit read must be exact.
		if err != nil || (split == len(report) && pid != 10856) || pid <= 0 {
			t.Errorf("split %d: pid %d, %v", split, pid, err)
		}
	}
	if _, err := readChildPid(strings.NewReader(`{"cgroup-namespace": 1}`)); err == nil {
		t.Error("a report without child-pid gave a pid")
	}
}
