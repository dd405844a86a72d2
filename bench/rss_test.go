package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/internal/testbin"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// nodeBinary is the oz0-node binary to measure: OZ0_BENCH_NODE (scripts/bench
// builds it once), else the one the end-to-end tests share (internal/testbin).
func nodeBinary(b testing.TB) string {
	if p := os.Getenv("OZ0_BENCH_NODE"); p != "" {
		return p
	}
	return testbin.Node(b)
}

func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// benchRSS runs the real node with n sandboxed servers and reports the node's own
// resident memory (not its sandboxes') once all of them run.
func benchRSS(b *testing.B, n int) {
	bwrapOrSkip(b)
	bin := nodeBinary(b)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("demo-%02d", i)
	}
	d, _ := testNode(b, "demo", names...)
	var mb float64
	for i := 0; i < b.N; i++ {
		mb = runAndMeasure(b, bin, d, n)
	}
	b.ReportMetric(mb, "node-RSS-MB")
	b.ReportMetric(0, "ns/op")
}

func runAndMeasure(b *testing.B, bin string, d datadir.Dir, n int) float64 {
	var log bytes.Buffer
	cmd := exec.Command(bin, "--data-dir", d.Root, "run", "--backend", "bwrap", "--log-format", "json")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := api.NewClient(d.Control()).Status(context.Background())
		if err == nil {
			running := 0
			for _, p := range st.Plugins {
				for _, s := range p.Servers {
					if s.State == api.StateRunning {
						running++
					}
				}
			}
			if running == n {
				time.Sleep(2 * time.Second) // let start-up garbage be collected
				return float64(rssKB(cmd.Process.Pid)) / 1024
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("not all %d servers came up:\n%s", n, log.String())
	return 0
}

func BenchmarkNodeRSS10(b *testing.B) { benchRSS(b, 10) }
func BenchmarkNodeRSS50(b *testing.B) { benchRSS(b, 50) }
