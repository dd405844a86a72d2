// Package bench holds the benchmarks behind `make bench` that need the whole node:
// tool calls through the gateway versus a direct client of the same sandboxed
// server, policy evaluation, and the node's memory with many running servers.
// Each reports median and p90 as extra metrics, so scripts/bench can print them
// side by side.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/fixtures"
	"oz0.ai/node/internal/gcpace"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

func TestMain(m *testing.M) {
	reexec.Init() // the test binary serves as the node binary inside sandboxes
	// The gateway runs in this process here; give it the collector's pacing
	// `oz0-node run` has (both paths of a comparison share it).
	if os.Getenv("GOGC") == "" {
		go gcpace.Run(context.Background(), gcpace.Default, slog.New(slog.DiscardHandler))
	}
	os.Exit(m.Run())
}

// latencies records per-call durations and reports their median and p90.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	b.ReportMetric(float64(l.d[len(l.d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(l.d[len(l.d)*9/10].Microseconds()), "p90-µs")
}

// bwrapOrSkip returns the bwrap backend when it works here.
func bwrapOrSkip(b testing.TB) sandbox.Backend {
	if runtime.GOOS != "linux" {
		b.Skip("not measured: sandboxed benchmarks need Linux")
	}
	be, err := backendlinux.New(policy.BackendBwrap)
	if err != nil {
		b.Skipf("not measured: %v", err)
	}
	if p := be.Probe(context.Background()); !p.Works {
		b.Skipf("not measured: bwrap does not work here: %v", p.Err)
	}
	return be
}

// testNode is a data folder with fixture plugins installed under the given names.
func testNode(b testing.TB, fixture string, names ...string) (datadir.Dir, *plan.Node) {
	parent, err := os.MkdirTemp("", "oz0-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(parent) })
	failOnNullNetns(b, filepath.Join(parent, "data"))
	os.Chmod(parent, 0o711)
	d, _ := datadir.New(filepath.Join(parent, "data"))
	if err := d.Create(os.Geteuid() == 0); err != nil {
		b.Fatal(err)
	}
	for i, name := range names {
		commit := fmt.Sprintf("%040x", i+1)
		dst := d.PluginCommit(name, commit)
		if _, err := fixtures.Extract(fixture, dst); err != nil {
			b.Fatal(err)
		}
		if name != fixture {
			renamePlugin(b, dst, name)
		}
		if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "bench", InstalledAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	n := plan.New(d, config.Run{Mode: policy.Strict}, probe.Assume(runtime.GOOS, policy.BackendBwrap, false), nil)
	return d, n
}

// renamePlugin rewrites a copied fixture's manifest name.
func renamePlugin(b testing.TB, dir, name string) {
	p := filepath.Join(dir, "plugin.json")
	data, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	out := []byte(fmt.Sprintf(`{"name": %q, "version": "1.0.0"}`, name))
	_ = data
	if err := os.WriteFile(p, out, 0o644); err != nil {
		b.Fatal(err)
	}
}

// direct connects a go-sdk client straight to the demo server in the sandbox the
// node would build for it (no gateway).
func direct(b testing.TB, be sandbox.Backend, n *plan.Node) *mcp.ClientSession {
	p, err := n.One("demo")
	if err != nil {
		b.Fatal(err)
	}
	spec, _, err := p.ServerSpec("main", plan.Proxy{})
	if err != nil {
		b.Fatal(err)
	}
	p.EnsureHome()
	if err := p.EnsureView(spec); err != nil {
		b.Fatal(err)
	}
	proc, err := be.Command(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.CommandTransport{Command: proc.Cmd}, gateway.SessionOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close(); proc.Cleanup() })
	return cs
}

// throughGateway starts the daemon and connects a client to <data>/run/mcp.sock.
func throughGateway(b testing.TB, be sandbox.Backend, d datadir.Dir, n *plan.Node) *mcp.ClientSession {
	return throughGatewayWith(b, d, daemon.Config{Node: n, Backends: map[string]sandbox.Backend{policy.BackendBwrap: be}, Version: "bench"})
}

// throughGatewayWith is throughGateway with the daemon's whole configuration.
func throughGatewayWith(b testing.TB, d datadir.Dir, cfg daemon.Config) *mcp.ClientSession {
	dm := daemon.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { dm.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := api.NewClient(d.Control()).Status(context.Background()); err == nil && len(st.Plugins) > 0 && st.Plugins[0].Servers[0].State == api.StateRunning {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return streamableClient(b, d.MCP())
}

// sessionRevision asks HTTP doors for a session (the newest revision with them):
// the rows over HTTP measure calls on a session, as the node's peers serve them; a
// client of the sessionless revision takes the SDK's stateless path
// (docs/performance.md).
var sessionRevision = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// streamableClient connects a go-sdk client over Streamable HTTP to the MCP
// endpoint on the unix socket sock, keeping a connection per concurrent caller.
func streamableClient(b testing.TB, sock string) *mcp.ClientSession {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	}}}
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://oz0-node/mcp", HTTPClient: hc}, sessionRevision)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

func callLoop(b *testing.B, cs *mcp.ClientSession, tool string, parallel int) {
	var lat latencies
	args := map[string]any{"text": "x"}
	b.ResetTimer()
	start := time.Now()
	if parallel <= 1 {
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil || res.IsError {
				b.Fatalf("call %s: %v %+v", tool, err, res)
			}
			lat.add(time.Since(t0))
		}
	} else {
		b.SetParallelism((parallel + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				t0 := time.Now()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
				if err != nil || res.IsError {
					b.Errorf("call %s: %v", tool, err)
					return
				}
				lat.add(time.Since(t0))
			}
		})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
	lat.report(b)
}

// BenchmarkToolCall compares a call of the same sandboxed server's tool made
// directly and through the gateway, with one caller and with 8.
func BenchmarkToolCall(b *testing.B) {
	be := bwrapOrSkip(b)
	d, n := testNode(b, "demo", "demo")
	dcs := direct(b, be, n)
	gcs := throughGateway(b, be, d, n)
	b.Run("direct", func(b *testing.B) { callLoop(b, dcs, "echo", 1) })
	b.Run("gateway", func(b *testing.B) { callLoop(b, gcs, "demo__echo", 1) })
	b.Run("direct-8", func(b *testing.B) { callLoop(b, dcs, "echo", 8) })
	b.Run("gateway-8", func(b *testing.B) { pairedBursts(b, dcs, "echo", gcs, "demo__echo") })
	b.Run("ceiling-8", func(b *testing.B) { pairedBursts(b, dcs, "echo", selfAnswering(b), "echo") })
}

// pairedBursts measures 8 concurrent callers of cs (tool) in rounds, each right
// after a burst of the same size made directly (base, baseTool): this machine's
// speed drifts between sub-benchmarks by more than the margins that matter, so
// the median ratio of the pairs is reported beside the median calls/s.
func pairedBursts(b *testing.B, base *mcp.ClientSession, baseTool string, cs *mcp.ClientSession, tool string) {
	const callers, perCaller = 8, 100
	burst := func(cs *mcp.ClientSession, tool string) float64 {
		args := map[string]any{"text": "x"}
		var wg sync.WaitGroup
		start := time.Now()
		for range callers {
			wg.Go(func() {
				for range perCaller {
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
					if err != nil || res.IsError {
						b.Errorf("call %s: %v", tool, err)
						return
					}
				}
			})
		}
		wg.Wait()
		return callers * perCaller / time.Since(start).Seconds()
	}
	var rates, bases, ratios []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d := burst(base, baseTool)
		v := burst(cs, tool)
		rates, bases, ratios = append(rates, v), append(bases, d), append(ratios, v/d)
	}
	b.ReportMetric(median(rates), "calls/s")
	b.ReportMetric(median(bases), "base-calls/s")
	b.ReportMetric(median(ratios), "x-paired-direct")
}

// selfAnswering connects the same kind of client as throughGateway to a go-sdk
// Streamable HTTP server on a unix socket whose echo tool answers by itself. It
// is what a gateway built on the go-sdk's server would reach if forwarding a
// call to the plugin's server cost nothing: the ceiling for "through the gateway".
func selfAnswering(b testing.TB) *mcp.ClientSession {
	srv := mcp.NewServer(&mcp.Implementation{Name: "self", Version: "1"}, nil)
	// A raw handler, like the gateway's: no schema validation, no decoding of
	// the arguments into a struct.
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
	})
	sock := filepath.Join(b.TempDir(), "mcp.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	b.Cleanup(func() { hs.Close() })
	return streamableClient(b, sock)
}

// BenchmarkPolicyDecide measures one decision, as made before every call.
func BenchmarkPolicyDecide(b *testing.B) {
	dir := b.TempDir()
	fixtures.Extract("egress-demo", dir)
	d, _ := datadir.New(dir)
	_ = d
	p, err := func() (*plan.Plugin, error) {
		_, n := testNode(b, "egress-demo", "egress-demo")
		return n.One("egress-demo")
	}()
	if err != nil {
		b.Fatal(err)
	}
	in := policy.Inputs{Manifest: p.Manifest, Commit: p.Installed.Commit, Mode: policy.Strict, OS: "linux", Tier: 1,
		Backend: policy.BackendBwrap, Root: true, DataDirTraversable: true,
		Exemptions: []policy.Exemption{{Name: "other"}, {Name: "egress-demo", Commit: "abcdef0"}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		policy.Decide(in)
	}
}

// BenchmarkCheckBeforeCall measures the whole per-call re-evaluation: the
// installed commit read again, the decision recomputed.
func BenchmarkCheckBeforeCall(b *testing.B) {
	d, n := testNode(b, "demo", "demo")
	all, _ := installed.List(d)
	n.Plan(all) // as the running node does at every reconcile
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := n.One("demo"); err != nil {
			b.Fatal(err)
		}
	}
}

// median of a benchmark's runs: one slow run (the machine is shared with a
// sandbox's own start-up) does not decide the figure.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
