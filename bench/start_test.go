package bench

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// BenchmarkSandboxStart runs /bin/true to completion: bare, under raw bwrap with
// --unshare-all, and in the sandbox the node builds for the demo plugin with bwrap,
// gVisor and Landlock (uid switch, seccomp, rlimits, cgroup and cleanup included).
func BenchmarkSandboxStart(b *testing.B) {
	run := func(b *testing.B, start func() error) {
		var lat latencies
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := start(); err != nil {
				b.Fatal(err)
			}
			lat.add(time.Since(t0))
		}
		lat.report(b)
	}
	// The node's starts are timed from Command to the tool's exit; tearing the
	// sandbox down afterwards (cgroup removal) is not part of a start.
	timed := func(b *testing.B, be sandbox.Backend, spec *sandbox.Spec) {
		var lat latencies
		for i := 0; i < b.N; i++ {
			d, err := startOnce(be, spec)
			if err != nil {
				b.Fatal(err)
			}
			lat.add(d)
		}
		lat.report(b)
	}
	b.Run("bare", func(b *testing.B) {
		run(b, func() error { return exec.Command("/bin/true").Run() })
	})
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("not measured: bwrap is not installed")
	}
	b.Run("raw-bwrap", func(b *testing.B) {
		run(b, func() error {
			return exec.Command(bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
				"--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "/bin/true").Run()
		})
	})
	for _, name := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendLandlock} {
		be, err := backendlinux.New(name)
		if err != nil {
			continue
		}
		if p := be.Probe(context.Background()); !p.Works {
			b.Logf("not measured: %s does not work here: %v", name, p.Err)
			continue
		}
		d, n := testNode(b, "demo", "demo")
		all, _ := installed.List(d)
		n.Plan(all)
		n.Backend = name
		if name == policy.BackendGVisor {
			n.GVisor = true
		}
		p, err := n.One("demo")
		if err != nil {
			b.Fatal(err)
		}
		p.EnsureHome()
		spec, _, err := p.ExecSpec("", []string{"/bin/true"}, plan.Proxy{})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.EnsureView(spec); err != nil {
			b.Fatal(err)
		}
		b.Run("node-"+name, func(b *testing.B) { timed(b, be, spec) })
	}
}

// startOnce starts /bin/true in the sandbox and returns how long it took to run,
// then cleans up.
func startOnce(be sandbox.Backend, spec *sandbox.Spec) (time.Duration, error) {
	t0 := time.Now()
	proc, err := be.Command(context.Background(), spec)
	if err != nil {
		return 0, err
	}
	proc.Cmd.Stdout, proc.Cmd.Stderr = nil, os.Stderr
	err = proc.Cmd.Run()
	d := time.Since(t0)
	if cerr := proc.Cleanup(); err == nil {
		err = cerr
	}
	return d, err
}
