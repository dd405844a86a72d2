package backendlinux

import (
	"context"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
)

// Start benchmarks, side by side (go test -run '^$' -bench Start ./backend_linux):
// bare /bin/true, raw bwrap, the node's bwrap start (plan → Spec → Command → Run,
// uid switch, cgroup, rlimits, seccomp), the node's gVisor start, and one re-exec of
// the node binary (what a helper step before bwrap would add). Each reports the
// median as well as the mean.

func init() { reexec.Register("bench-true", func([]string) int { return 0 }) }

func benchStart(b *testing.B, run func() error) {
	b.Helper()
	benchTimed(b, func() (time.Duration, error) {
		t0 := time.Now()
		err := run()
		return time.Since(t0), err
	})
}

// benchTimed runs b.N starts, each timing itself, and reports their median.
func benchTimed(b *testing.B, run func() (time.Duration, error)) {
	b.Helper()
	times := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		d, err := run()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, d)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
}

func BenchmarkStartBareTrue(b *testing.B) {
	benchStart(b, func() error { return exec.Command("/bin/true").Run() })
}

func BenchmarkStartRawBwrap(b *testing.B) {
	path := findTool("bwrap")
	if path == "" {
		b.Skip("no bwrap")
	}
	args := []string{"--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--", "/bin/true"}
	benchStart(b, func() error { return exec.Command(path, args...).Run() })
}

func BenchmarkStartReexecHop(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	benchStart(b, func() error {
		c := exec.Command(self)
		c.Args[0] = reexec.Argv0("bench-true")
		return c.Run()
	})
}

// benchNode times a start: Command, then Run until the tool has exited. Cleanup
// (the stop: cgroup and bundle removal) is timed apart as cleanup-ms.
func benchNode(b *testing.B, name string, noCgroup bool) {
	be := backendFor(b, name)
	n := newTestNode(b, be, "demo")
	s := n.spec("demo", "/bin/true")
	if noCgroup {
		s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.CPUPercent = 0, 0, 0
	}
	var cleanup time.Duration
	benchTimed(b, func() (time.Duration, error) {
		t0 := time.Now()
		p, err := be.Command(context.Background(), s)
		if err != nil {
			return 0, err
		}
		err = p.Cmd.Run()
		d := time.Since(t0)
		b.StopTimer()
		t1 := time.Now()
		p.Cleanup()
		cleanup += time.Since(t1)
		b.StartTimer()
		return d, err
	})
	b.ReportMetric(float64(cleanup.Microseconds())/1000/float64(b.N), "cleanup-ms")
}

func BenchmarkStartNodeBwrap(b *testing.B) { benchNode(b, policy.BackendBwrap, false) }

// bwrap with exactly the node's mounts, uid switch and seccomp, but no gate and no
// limits: the node's own machinery is the difference to BenchmarkStartNodeBwrap,
// the spec's ~25 mounts the difference to BenchmarkStartRawBwrap.
func BenchmarkStartBwrapSameMountsNoLimits(b *testing.B) {
	be := backendFor(b, policy.BackendBwrap)
	n := newTestNode(b, be, "demo")
	s := n.spec("demo", "/bin/true")
	s.Limits = sandbox.Limits{}
	benchTimed(b, func() (time.Duration, error) {
		t0 := time.Now()
		p, err := be.Command(context.Background(), s)
		if err != nil {
			return 0, err
		}
		// bwrap --args 3 -- /bin/sh -c SCRIPT oz0-gate /bin/true → without the gate.
		p.Cmd.Args = append(p.Cmd.Args[:4], p.Cmd.Args[8:]...)
		err = p.Cmd.Run()
		d := time.Since(t0)
		p.Cleanup()
		return d, err
	})
}
func BenchmarkStartNodeGVisor(b *testing.B) { benchNode(b, policy.BackendGVisor, false) }

// Without memory, pids and CPU limits there is no cgroup to join: the difference is
// the cgroup v1 migration (an RCU grace period of the kernel's cgroup lock).
func BenchmarkStartNodeBwrapNoCgroup(b *testing.B) { benchNode(b, policy.BackendBwrap, true) }
