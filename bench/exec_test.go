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

// execPairs is how many pairs each exec row is measured over.
const execPairs = 30

// BenchmarkExecStart times `oz0-node exec demo --backend B -- /bin/true` as a user
// runs it (the whole process: start-up, plan, egress endpoint, sandbox, teardown),
// each run paired with its yardstick just before it: raw bwrap for the bwrap row,
// the node's own in-process gVisor start for the gVisor row. The first exec of
// each backend (which probes and fills the data folder's cache) is a warm-up, not
// counted. Two floor rows show what no exec can beat: the node binary starting and
// exiting, and the in-node bwrap start with its teardown.
func BenchmarkExecStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("not measured: exec runs plugin sandboxes as per-plugin users, which needs root")
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("not measured: bwrap is not installed")
	}
	bin := nodeBinary(b)
	d, n := testNode(b, "demo", "demo")
	proc := func(argv ...string) func() error {
		return func() error { return exec.Command(argv[0], argv[1:]...).Run() }
	}
	execOf := func(backend string) func() error {
		return proc(bin, "--data-dir", d.Root, "exec", "demo", "--backend", backend, "--", "/bin/true")
	}
	raw := proc(bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "/bin/true")
	timed := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		err := f()
		return time.Since(t0), err
	}
	type row struct {
		name  string
		lat   []time.Duration
		ratio []float64
	}
	var rows []*row
	pair := func(baseName, name string, base, f func() (time.Duration, error)) {
		if _, err := f(); err != nil { // warm-up: probes once, fills the cache
			b.Logf("not measured: %s: %v", name, err)
			return
		}
		rb, ra := &row{name: baseName}, &row{name: name}
		for range execPairs {
			db, err := base()
			if err != nil {
				b.Fatalf("%s: %v", baseName, err)
			}
			da, err := f()
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			rb.lat, ra.lat = append(rb.lat, db), append(ra.lat, da)
			ra.ratio = append(ra.ratio, float64(da)/float64(db))
		}
		rows = append(rows, rb, ra)
	}
	pair("raw-bwrap", "exec-bwrap", func() (time.Duration, error) { return timed(raw) },
		func() (time.Duration, error) { return timed(execOf(policy.BackendBwrap)) })
	// The Landlock tier, against the same yardstick (docs/promises.md §2).
	pair("raw-bwrap-for-landlock", "exec-landlock", func() (time.Duration, error) { return timed(raw) },
		func() (time.Duration, error) { return timed(execOf(policy.BackendLandlock)) })

	// The floors, paired with raw bwrap as well.
	pair("raw-bwrap-for-binary", "node-binary", func() (time.Duration, error) { return timed(raw) },
		func() (time.Duration, error) { return timed(proc(bin, "version")) })
	all, _ := installed.List(d)
	n.Plan(all)
	inNode := func(be sandbox.Backend, spec *sandbox.Spec) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return timed(func() error {
				pr, err := be.Command(context.Background(), spec)
				if err != nil {
					return err
				}
				if err = pr.Start(); err == nil { // as exec starts it
					err = pr.Cmd.Wait()
				}
				if cerr := pr.Cleanup(); err == nil {
					err = cerr
				}
				return err
			})
		}
	}
	if p, err := n.One("demo"); err == nil {
		p.EnsureHome()
		if spec, _, err := p.ExecSpec("", []string{"/bin/true"}, plan.Proxy{}); err == nil && p.EnsureView(spec) == nil {
			be, _ := backendlinux.New(policy.BackendBwrap)
			pair("raw-bwrap-for-node", "node-bwrap-teardown", func() (time.Duration, error) { return timed(raw) }, inNode(be, spec))
		}
	}

	gv, _ := backendlinux.New(policy.BackendGVisor)
	if pr := gv.Probe(context.Background()); !pr.Works {
		b.Logf("not measured: gVisor does not work here: %v", pr.Err)
	} else {
		n.Backend, n.GVisor = policy.BackendGVisor, true
		p, err := n.One("demo")
		if err != nil {
			b.Fatal(err)
		}
		spec, _, err := p.ExecSpec("", []string{"/bin/true"}, plan.Proxy{})
		if err != nil {
			b.Fatal(err)
		}
		pair("node-gvisor", "exec-gvisor", func() (time.Duration, error) { return startOnce(gv, spec) },
			func() (time.Duration, error) { return timed(execOf(policy.BackendGVisor)) })
		// The floor: the sandbox exec builds (with the egress bridge gVisor needs,
		// which the node's servers have too) started in-process, teardown included.
		if p, err = n.One("demo"); err != nil {
			b.Fatal(err)
		}
		bridged, _, err := p.ExecSpec("", []string{"/bin/true"}, plan.Proxy{Sockets: true})
		if err != nil {
			b.Fatal(err)
		}
		if bridged.Proxy != nil && bridged.Proxy.SocketDir != "" {
			os.MkdirAll(bridged.Proxy.SocketDir, 0o755)
		}
		pair("node-gvisor-for-floor", "node-gvisor-bridge-teardown", func() (time.Duration, error) { return startOnce(gv, spec) },
			func() (time.Duration, error) {
				return timed(func() error {
					pr, err := gv.Command(context.Background(), bridged)
					if err != nil {
						return err
					}
					err = pr.Cmd.Run()
					if cerr := pr.Cleanup(); err == nil {
						err = cerr
					}
					return err
				})
			})
	}
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			l := latencies{d: r.lat}
			l.report(b)
			if len(r.ratio) > 0 {
				b.ReportMetric(median(r.ratio), "x-paired-direct")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
