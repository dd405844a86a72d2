package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// The gateway against its peers: 8 callers reach the same backend's echo tool
// directly and through each door, in bursts paired with a direct burst just
// before; the medians of 15 pairs are reported. Peers: TBXark/mcp-proxy (Go),
// punkpeye's mcp-proxy and supergateway (Node.js), installed where they can be
// (OZ0_BENCH_TBXARK, OZ0_BENCH_NPM_PEERS; scripts/bench prepares them).
const (
	peerPairs     = 15
	peerCallers   = 8
	peerPerCaller = 100
)

// door is one way of reaching a backend's echo tool, and the processes whose CPU
// and memory the way itself costs (never the backend's).
type door struct {
	cs   *mcp.ClientSession
	tool string
	pids []int
}

// burst makes peerCallers callers call d's tool peerPerCaller times each, at
// once; it returns calls per second and adds each call's latency to lat.
func burst(b *testing.B, d door, lat *latencies) float64 {
	args := map[string]any{"text": "x"}
	var wg sync.WaitGroup
	start := time.Now()
	for range peerCallers {
		wg.Go(func() {
			for range peerPerCaller {
				t0 := time.Now()
				res, err := d.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: d.tool, Arguments: args})
				if err != nil || res.IsError {
					b.Errorf("call %s: %v %+v", d.tool, err, res)
					return
				}
				if lat != nil {
					lat.add(time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
	return peerCallers * peerPerCaller / time.Since(start).Seconds()
}

// cpuSeconds is the user+system time a process has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func cpuOf(pids []int) float64 {
	var t float64
	for _, p := range pids {
		t += cpuSeconds(p)
	}
	return t
}

// pairedDoor measures d against base in peerPairs pairs and reports calls/s,
// the median ratio to the direct burst before each, p50 and p90 latency, CPU per
// call of d's own processes and their resident memory.
func pairedDoor(b *testing.B, base, d door) {
	var rates, ratios []float64
	var lat latencies
	var cpu float64
	b.ResetTimer()
	for range peerPairs {
		r0 := burst(b, base, nil)
		c0 := cpuOf(d.pids)
		r := burst(b, d, &lat)
		cpu += cpuOf(d.pids) - c0
		rates, ratios = append(rates, r), append(ratios, r/r0)
	}
	b.StopTimer()
	b.ReportMetric(median(rates), "calls/s")
	if len(d.pids) > 0 {
		b.ReportMetric(median(ratios), "x-paired-direct")
		b.ReportMetric(cpu/float64(peerPairs*peerCallers*peerPerCaller)*1e6, "cpu-µs/call")
		rss := 0
		for _, p := range d.pids {
			rss += rssKB(p)
		}
		b.ReportMetric(float64(rss)/1024, "RSS-MB")
	}
	lat.report(b)
	b.ReportMetric(0, "ns/op")
}

// startProc starts a process of the benchmark's own, ended (by its pid) at cleanup.
func startProc(b *testing.B, cmd *exec.Cmd) *exec.Cmd {
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", cmd.Path, err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if b.Failed() {
			b.Logf("%s output:\n%s", filepath.Base(cmd.Path), log.String())
		}
	})
	return cmd
}

func freePort(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// httpDoor connects a go-sdk client over Streamable HTTP to url, retrying while
// the server comes up.
func httpDoor(b *testing.B, url, token, tool string, pids ...int) door {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return tr.RoundTrip(r)
	})}
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var cs *mcp.ClientSession
		cs, err = cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, sessionRevision)
		if err == nil {
			b.Cleanup(func() { cs.Close() })
			return door{cs: cs, tool: tool, pids: pids}
		}
	}
	b.Fatalf("connect %s: %v", url, err)
	return door{}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// cmdDoor starts cmd as a stdio MCP server (a backend, or the bridge) and
// connects to it; with own, cmd's process is part of the door.
func cmdDoor(b *testing.B, cmd *exec.Cmd, tool string, own bool, pids ...int) door {
	cl := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatalf("connect %v: %v", cmd.Args, err)
	}
	b.Cleanup(func() { cs.Close() })
	if own {
		pids = append(pids, cmd.Process.Pid)
	}
	return door{cs: cs, tool: tool, pids: pids}
}

// goEchoBinary is the Go backend: OZ0_BENCH_GO_ECHO (scripts/bench builds it),
// else one built now.
func goEchoBinary(b *testing.B) string {
	if p := os.Getenv("OZ0_BENCH_GO_ECHO"); p != "" {
		return p
	}
	_, self, _, _ := runtime.Caller(0)
	dir := b.TempDir()
	bin := filepath.Join(dir, "echoserver")
	cmd := exec.Command("go", "build", "-o", bin, "./bench/echoserver")
	cmd.Dir = filepath.Join(filepath.Dir(self), "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Skipf("not measured: the Go backend does not build: %v\n%s", err, out)
	}
	return bin
}

// installGoEcho installs a plugin "goecho" whose one server is the Go backend.
func installGoEcho(b *testing.B, d datadir.Dir, bin string) {
	commit := fmt.Sprintf("%040x", 99)
	dst := d.PluginCommit("goecho", commit)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(dst, "echoserver"), data, 0o755)
	os.WriteFile(filepath.Join(dst, "plugin.json"), []byte(`{"name": "goecho", "version": "1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(dst, ".mcp.json"), []byte(`{"mcpServers": {"main": {"command": "${PLUGIN_ROOT}/echoserver"}}}`), 0o644)
	if err := installed.Activate(d, installed.Meta{Name: "goecho", Commit: commit, Source: "bench", InstalledAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
}

// runNode starts the real node on d, serving --mcp-listen; it returns the node's
// process, the listen address and its token once every server runs.
func runNode(b *testing.B, d datadir.Dir) (*exec.Cmd, string, string) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(b))
	args := []string{"--data-dir", d.Root, "run", "--mcp-listen", addr, "--log-format", "json"}
	if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		args = append(args, "--backend", "bwrap")
	} else {
		args = append(args, "--plugin-sandbox", "off")
	}
	cmd := startProc(b, exec.Command(nodeBinary(b), args...))
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, err := api.NewClient(d.Control()).Status(context.Background())
		if err != nil {
			continue
		}
		up, all := 0, 0
		for _, p := range st.Plugins {
			for _, s := range p.Servers {
				all++
				if s.State == api.StateRunning || s.State == api.StateUnsandboxed {
					up++
				}
			}
		}
		if all > 0 && up == all {
			tok, err := os.ReadFile(d.Token())
			if err != nil {
				b.Fatal(err)
			}
			return cmd, addr, strings.TrimSpace(string(tok))
		}
	}
	b.Fatal("the node's servers did not all come up")
	return nil, "", ""
}

// peers names the peers' rows; each starts a proxy in front of backend (argv)
// and returns its door, or skips saying why it cannot here.
var peers = []struct {
	name  string
	start func(b *testing.B, backend []string) door
}{
	{"tbxark", func(b *testing.B, backend []string) door {
		url, pid := startTBXark(b, backend)
		return httpDoor(b, url, "", "echo", pid)
	}},
	{"punkpeye", func(b *testing.B, backend []string) door {
		entry := npmPeer(b, "mcp-proxy", "dist/bin/mcp-proxy.mjs")
		port := freePort(b)
		cmd := startProc(b, exec.Command("node", append([]string{entry, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--"}, backend...)...))
		return httpDoor(b, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), "", "echo", cmd.Process.Pid)
	}},
	{"supergateway", func(b *testing.B, backend []string) door {
		entry := npmPeer(b, "supergateway", "dist/index.js")
		port := freePort(b)
		cmd := startProc(b, exec.Command("node", entry, "--stdio", strings.Join(backend, " "), "--outputTransport", "streamableHttp",
			"--stateful", "--port", strconv.Itoa(port), "--logLevel", "none"))
		return httpDoor(b, fmt.Sprintf("http://127.0.0.1:%d/mcp", port), "", "echo", cmd.Process.Pid)
	}},
}

// startTBXark starts TBXark/mcp-proxy in front of backend (argv) and returns its
// endpoint and process.
func startTBXark(b *testing.B, backend []string) (string, int) {
	bin := os.Getenv("OZ0_BENCH_TBXARK")
	if bin == "" {
		b.Skip("not measured: TBXark/mcp-proxy is not built here (OZ0_BENCH_TBXARK; scripts/bench builds v0.43.2)")
	}
	port := freePort(b)
	cfg := map[string]any{
		"mcpProxy": map[string]any{"baseURL": fmt.Sprintf("http://127.0.0.1:%d", port), "addr": fmt.Sprintf("127.0.0.1:%d", port),
			"name": "bench", "version": "1", "type": "streamable-http", "options": map[string]any{"logEnabled": false}},
		"mcpServers": map[string]any{"b": map[string]any{"command": backend[0], "args": backend[1:]}},
	}
	path := filepath.Join(b.TempDir(), "config.json")
	data, _ := json.Marshal(cfg)
	os.WriteFile(path, data, 0o600)
	cmd := startProc(b, exec.Command(bin, "--config", path))
	return fmt.Sprintf("http://127.0.0.1:%d/b/", port), cmd.Process.Pid
}

// npmPeer is the entry point of an npm-installed peer under OZ0_BENCH_NPM_PEERS.
func npmPeer(b *testing.B, pkg, entry string) string {
	dir := os.Getenv("OZ0_BENCH_NPM_PEERS")
	if dir == "" {
		b.Skipf("not measured: %s is not installed here (OZ0_BENCH_NPM_PEERS; scripts/bench installs it with npm)", pkg)
	}
	p := filepath.Join(dir, "node_modules", pkg, entry)
	if _, err := os.Stat(p); err != nil {
		b.Skipf("not measured: %s did not install: %v", pkg, err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		b.Skipf("not measured: %s needs node: %v", pkg, err)
	}
	return p
}

// echoBackend is a backend the gateway benches call through each door: its
// plugin on the node and the command that runs it directly.
type echoBackend struct {
	name, plugin string
	argv         []string
}

// echoBench makes a data folder with the Python fixture and the Go echo server
// installed, runs the real node on it and returns the node with its
// --mcp-listen address and token, and the two backends.
func echoBench(b *testing.B) (d datadir.Dir, node *exec.Cmd, addr, token string, backends []echoBackend) {
	b.Helper()
	if runtime.GOOS != "linux" {
		b.Skip("not measured: CPU and memory are read from /proc")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("not measured: the Python backend needs python3")
	}
	goEcho := goEchoBinary(b)
	d, n := testNode(b, "demo", "demo")
	installGoEcho(b, d, goEcho)
	p, err := n.One("demo")
	if err != nil {
		b.Fatal(err)
	}
	node, addr, token = runNode(b, d)
	return d, node, addr, token, []echoBackend{
		{"py", "demo", []string{"python3", filepath.Join(p.Installed.Dir, "server.py"), "--tools", "echo"}},
		{"go", "goecho", []string{goEcho}},
	}
}

// BenchmarkGatewayPeers: tool calls/s with 8 callers through each door of the
// node and through its peers, on a Python and a Go backend (each in pairs with
// a direct burst to the same backend).
func BenchmarkGatewayPeers(b *testing.B) {
	d, node, addr, token, backends := echoBench(b)
	bin := nodeBinary(b)
	for _, be := range backends {
		direct := cmdDoor(b, exec.Command(be.argv[0], be.argv[1:]...), "echo", false)
		tool := be.plugin + "__echo"
		b.Run(be.name+"-direct", func(b *testing.B) { pairedDoor(b, direct, door{cs: direct.cs, tool: "echo"}) })
		b.Run(be.name+"-listen", func(b *testing.B) {
			pairedDoor(b, direct, httpDoor(b, "http://"+addr+"/mcp", token, tool, node.Process.Pid))
		})
		b.Run(be.name+"-bridge", func(b *testing.B) {
			pairedDoor(b, direct, cmdDoor(b, exec.Command(bin, "--data-dir", d.Root, "mcp"), tool, true, node.Process.Pid))
		})
		for _, peer := range peers {
			b.Run(be.name+"-"+peer.name, func(b *testing.B) { pairedDoor(b, direct, peer.start(b, be.argv)) })
		}
		if be.name != "py" {
			continue
		}
		// Ceilings, measured the same way: what a door could reach at best here.
		b.Run(be.name+"-ceiling-relay", func(b *testing.B) {
			// The bridge's hop alone: oz0-node mcp relaying (the socket's other
			// end takes no pipes) to the backend's own stdin and stdout (no node).
			rd := socketDir(b, func(c net.Conn) { backendOn(b, c, be.argv) })
			pairedDoor(b, direct, cmdDoor(b, exec.Command(bin, "--data-dir", rd.Root, "mcp", "--relay"), "echo", true))
		})
		b.Run(be.name+"-ceiling-sdk-stdio", func(b *testing.B) {
			// The go-sdk server answering by itself behind the relaying bridge:
			// the forwarding to a backend costs nothing here.
			srv := selfServer()
			rd := socketDir(b, func(c net.Conn) {
				if ss, err := srv.Connect(context.Background(), &mcp.IOTransport{Reader: c, Writer: c}, nil); err == nil {
					ss.Wait()
				}
			})
			pairedDoor(b, direct, cmdDoor(b, exec.Command(bin, "--data-dir", rd.Root, "mcp", "--relay"), "echo", true))
		})
		b.Run(be.name+"-ceiling-sdk-http", func(b *testing.B) {
			// The same over Streamable HTTP on loopback, as --mcp-listen serves it.
			srv := selfServer()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: true})}
			go hs.Serve(ln)
			b.Cleanup(func() { hs.Close() })
			d := httpDoor(b, "http://"+ln.Addr().String()+"/mcp", "", "echo")
			d.pids = []int{os.Getpid()} // the server shares this process with the callers
			pairedDoor(b, direct, d)
		})
	}
}

// selfServer is a go-sdk server whose echo tool answers by itself, with a raw
// handler like the gateway's.
func selfServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "self", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
	})
	return srv
}

// socketDir is a data folder of the benchmark's own whose stdio endpoint socket
// hands each connection to serve.
func socketDir(b *testing.B, serve func(net.Conn)) datadir.Dir {
	d, err := datadir.New(filepath.Join(b.TempDir(), "d"))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(d.Run(), 0o700); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("unix", d.MCPStdio())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return d
}

// backendOn starts the backend with the connection as its stdin and stdout.
func backendOn(b *testing.B, c net.Conn, argv []string) {
	f, err := c.(*net.UnixConn).File()
	c.Close()
	if err != nil {
		b.Error(err)
		return
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout = f, f
	if err := cmd.Start(); err != nil {
		b.Error(err)
		return
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}
