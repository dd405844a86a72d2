package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// curlSpeed runs curl (argv) and returns the download speed it reports, in MB/s.
func curlSpeed(b *testing.B, cmd *exec.Cmd) float64 {
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%v: %v", cmd.Args, err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatalf("curl speed %q: %v", out, err)
	}
	return v / 1e6
}

// BenchmarkEgressFromSandbox downloads 1 GB with curl from a loopback server:
// directly on the host, through a bare relay (the ceiling), and from inside the
// demo plugin's bwrap sandbox through the node's egress proxy, as absolute-form
// HTTP and through a CONNECT tunnel — with the proxy serving the listener the
// in-sandbox bridge handed it (non-root nodes, exec), and a listener the node
// opened in the sandbox's namespace itself (run on a root node), and
// transparently (no proxy: the node's resolver and its listener per name).
func BenchmarkEgressFromSandbox(b *testing.B) {
	be := bwrapOrSkip(b)
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("not measured: curl is not installed")
	}
	const size = 1 << 30
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.CopyN(w, zeros{}, size)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	d, n := testNode(b, "demo", "demo")
	all, _ := installed.List(d)
	n.Plan(all)
	n.NodeBinary = nodeBinary(b) // the bridge inside the sandbox
	// The port is listed so transparent egress listens on it (a portless name
	// gets the web's ports).
	os.WriteFile(d.TenantList(), []byte("big.test:"+port+"\n"), 0o644)
	px, err := egress.New(egress.Config{
		TenantListPath: d.TenantList(),
		AllowCIDRs:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	p, err := n.One("demo")
	if err != nil {
		b.Fatal(err)
	}
	// The endpoint of the server whose sandbox ExecSpec takes, as the node opens it.
	server := p.ExecServer("")
	if _, err := px.AddPlugin(egress.PluginRules{Plugin: "demo", Egress: []manifest.EgressEntry{{Host: "big.test"}}},
		egress.Listen{Socket: filepath.Join(d.EgressServerSocketDir("demo", server), sandbox.ProxySocket), Server: server,
			SocketGroup: int(p.Decision.User.GID)}); err != nil {
		b.Fatal(err)
	}
	p.EnsureHome()
	rules := egress.PluginRules{Plugin: "demo", Egress: []manifest.EgressEntry{{Host: "big.test"}}}
	inSandboxVia := func(netns, transparent bool, curlArgs ...string) *exec.Cmd {
		spec, _, err := p.ExecSpec("", append([]string{"curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}"}, curlArgs...), plan.Proxy{Sockets: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.EnsureView(spec); err != nil {
			b.Fatal(err)
		}
		if netns { // as the running node does for bwrap on a root node
			at := egress.Listen{}
			if transparent {
				spec.Proxy.Resolver = sandbox.ResolverAddr
				at.Resolver = netip.MustParseAddr(sandbox.ResolverAddr)
			}
			spec.Proxy.Attach = func(ns string) (func(), error) {
				ln, err := egress.ListenInNetns(ns, "127.0.0.1:"+strconv.Itoa(spec.Proxy.Port))
				if err != nil {
					return nil, err
				}
				at.Listener = ln
				if transparent {
					at.Netns = ns
				}
				ep, err := px.AddPlugin(rules, at)
				if err != nil {
					return nil, err
				}
				return func() { px.CloseEndpoint(ep) }, nil
			}
		}
		proc, err := be.Command(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { proc.Cleanup() })
		return proc.Cmd
	}
	inSandbox := func(curlArgs ...string) *exec.Cmd { return inSandboxVia(false, false, curlArgs...) }

	// Settle the machine before measuring: building the node binary above leaves
	// dirty pages whose write-back (seconds later, costly in a VM) halved the
	// first figures; and one discarded transfer warms the loopback path.
	syscall.Sync()
	curlSpeed(b, exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", "http://127.0.0.1:"+port+"/"))
	directCmd := func() *exec.Cmd {
		return exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", "http://127.0.0.1:"+port+"/")
	}
	b.Run("direct", func(b *testing.B) {
		var mbs []float64
		for i := 0; i < b.N; i++ {
			mbs = append(mbs, curlSpeed(b, directCmd()))
		}
		b.ReportMetric(median(mbs), "curl-MB/s")
	})
	// Each other path is measured in pairs with a direct transfer just before it:
	// the machine's speed drifts between sub-benchmarks by more than the margins
	// that matter, so the ratio of each pair says more than medians taken apart.
	paired := func(b *testing.B, cmd func() *exec.Cmd) {
		var mbs, ratios []float64
		for i := 0; i < b.N; i++ {
			d := curlSpeed(b, directCmd())
			v := curlSpeed(b, cmd())
			mbs, ratios = append(mbs, v), append(ratios, v/d)
		}
		b.ReportMetric(median(mbs), "curl-MB/s")
		b.ReportMetric(median(ratios), "x-paired-direct")
	}
	b.Run("host-relay", func(b *testing.B) {
		relay := spliceRelay(b, "127.0.0.1:"+port)
		paired(b, func() *exec.Cmd {
			return exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", "http://"+relay+"/")
		})
	})
	b.Run("sandbox-http", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inSandbox("http://big.test:" + port + "/") })
	})
	b.Run("sandbox-connect", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inSandbox("-p", "http://big.test:"+port+"/") })
	})
	if os.Geteuid() != 0 {
		b.Log("not measured: the listener inside the sandbox's namespace needs a root node")
		return
	}
	b.Run("sandbox-connect-netns", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inSandboxVia(true, false, "-p", "http://big.test:"+port+"/") })
	})
	b.Run("sandbox-http-netns", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inSandboxVia(true, false, "http://big.test:"+port+"/") })
	})
	// A client that ignores the proxy variables: big.test resolves through the
	// node to an address of the sandbox's loopback, where the node listens.
	b.Run("sandbox-transparent", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inSandboxVia(true, true, "--noproxy", "*", "http://big.test:"+port+"/") })
	})

	// gVisor keeps its own network stack: the in-sandbox bridge relays the proxy
	// port, and is the sandbox's gate for transparent egress (it answers DNS by
	// asking the node and relays each connection to it).
	gv, _ := backendlinux.New(policy.BackendGVisor)
	if pr := gv.Probe(context.Background()); !pr.Works {
		b.Logf("not measured: gVisor does not work here: %v", pr.Err)
		return
	}
	n.Backend, n.GVisor = policy.BackendGVisor, true
	gp, err := n.One("demo")
	if err != nil {
		b.Fatal(err)
	}
	inGVisor := func(transparent bool, curlArgs ...string) *exec.Cmd {
		spec, _, err := gp.ExecSpec("", append([]string{"curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}"}, curlArgs...), plan.Proxy{Sockets: true})
		if err != nil {
			b.Fatal(err)
		}
		if transparent { // as the running node (and exec) do for gVisor
			spec.Proxy.Resolver = sandbox.ResolverAddr
		}
		proc, err := gv.Command(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { proc.Cleanup() })
		return proc.Cmd
	}
	b.Run("gvisor-connect", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inGVisor(false, "-p", "http://big.test:"+port+"/") })
	})
	b.Run("gvisor-transparent", func(b *testing.B) {
		paired(b, func() *exec.Cmd { return inGVisor(true, "--noproxy", "*", "http://big.test:"+port+"/") })
	})
}

// spliceRelay forwards each connection on a new loopback port to target, both
// ways, with nothing else: no request parsing, no policy. The kernel splices
// the bytes (io.Copy between TCP connections), as the proxy's tunnels do. Its
// throughput is the most any relay in user space can reach on this machine —
// the ceiling for the proxy's figures.
func spliceRelay(b *testing.B, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
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
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}
