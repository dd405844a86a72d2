package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Benchmarks, loopback only. Throughput moves benchSize bytes per operation from a
// local server to the client; compare MB/s of Direct with the proxied ones:
//
//	go test -run XXX -bench 'Throughput|Latency' -benchtime 5x ./node/egress/
//
// Latency reports the median (p50-µs) of connect + CONNECT + first byte.

const benchSize = 256 << 20

// cpuMeter reports the process's CPU time (user+system; client, proxy and server
// together, since all run in this process) per GiB moved: unlike MB/s, it does not
// depend on what else the machine is running.
func cpuMeter(b *testing.B) func() { return cpuMeterOf(b, benchSize) }

// cpuMeterOf is cpuMeter for operations that move size bytes each.
func cpuMeterOf(b *testing.B, size int) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		gib := float64(b.N) * float64(size) / (1 << 30)
		b.ReportMetric(float64((cpu()-start).Milliseconds())/gib, "cpu-ms/GiB")
	}
}

// sourceServer writes size bytes to every connection, then closes it.
func sourceServer(b *testing.B, size int) netip.AddrPort {
	buf := make([]byte, 1<<20)
	return loopbackServer(b, func(c net.Conn) {
		for left := size; left > 0; {
			n := min(left, len(buf))
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
			left -= n
		}
	})
}

func drain(b *testing.B, r io.Reader, want int) {
	buf := make([]byte, 256<<10)
	got := 0
	for {
		n, err := r.Read(buf)
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if got != want {
		b.Fatalf("read %d bytes, want %d", got, want)
	}
}

// benchConnect opens a CONNECT tunnel over c; the returned reader holds anything
// read past the response (nothing, for a CONNECT answered before data flows).
func benchConnect(b *testing.B, c net.Conn, authority string) io.Reader {
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n%s\r\n", authority, testAuthHeader)
	br := bufio.NewReaderSize(c, 64)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		return io.MultiReader(br, c)
	}
	return c
}

func benchFixture(b *testing.B) *fixture {
	return newFixture(b, true, func(c *Config) { c.MaxConnsPerPlugin = 4096 })
}

// bridgeHop runs the in-sandbox bridge's forwarding in process: a loopback port
// forwarding to the proxy's unix socket.
func bridgeHop(b *testing.B, sock string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go serveBridge(ln, sock)
	return ln.Addr().String()
}

func BenchmarkThroughputDirect(b *testing.B) {
	src := sourceServer(b, benchSize)
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := net.Dial("tcp", src.String())
		if err != nil {
			b.Fatal(err)
		}
		drain(b, c, benchSize)
		c.Close()
	}
}

// The strict-sandbox path: tool → loopback port → bridge → unix socket → proxy → server.
func BenchmarkThroughputCONNECTBridgeUnix(b *testing.B) {
	f := benchFixture(b)
	hop := bridgeHop(b, f.ep.Socket)
	src := sourceServer(b, benchSize)
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := net.Dial("tcp", hop)
		if err != nil {
			b.Fatal(err)
		}
		drain(b, benchConnect(b, c, fmt.Sprintf("%s:%d", hostBoth, src.Port())), benchSize)
		c.Close()
	}
}

// The unix socket without the bridge (a listener opened in the sandbox's namespace
// would look like this).
func BenchmarkThroughputCONNECTUnix(b *testing.B) {
	f := benchFixture(b)
	src := sourceServer(b, benchSize)
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := net.Dial("unix", f.ep.Socket)
		if err != nil {
			b.Fatal(err)
		}
		drain(b, benchConnect(b, c, fmt.Sprintf("%s:%d", hostBoth, src.Port())), benchSize)
		c.Close()
	}
}

// Host-network modes: the plugin's loopback TCP port.
func BenchmarkThroughputCONNECTTCP(b *testing.B) {
	f := benchFixture(b)
	src := sourceServer(b, benchSize)
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := net.Dial("tcp", f.ep.TCP.String())
		if err != nil {
			b.Fatal(err)
		}
		drain(b, benchConnect(b, c, fmt.Sprintf("%s:%d", hostBoth, src.Port())), benchSize)
		c.Close()
	}
}

// Absolute-form HTTP through the proxy (a response body of benchSize).
func BenchmarkThroughputHTTPForward(b *testing.B) {
	f := benchFixture(b)
	buf := make([]byte, 1<<20)
	srv := newBenchHTTP(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(benchSize))
		for left := benchSize; left > 0; left -= len(buf) {
			w.Write(buf[:min(left, len(buf))])
		}
	})
	b.SetBytes(benchSize)
	defer cpuMeter(b)()
	for b.Loop() {
		c, err := net.Dial("unix", f.ep.Socket)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET http://%s:%d/ HTTP/1.1\r\nConnection: close\r\n\r\n", hostBoth, srv.Port())
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 256<<10), nil)
		if err != nil {
			b.Fatal(err)
		}
		drain(b, resp.Body, benchSize)
		c.Close()
	}
}

func newBenchHTTP(b *testing.B, h http.HandlerFunc) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close() })
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// firstByteServer writes one byte on accept and closes when the client does.
func firstByteServer(b *testing.B) netip.AddrPort {
	return loopbackServer(b, func(c net.Conn) {
		c.Write([]byte{'x'})
		io.Copy(io.Discard, c)
	})
}

func reportMedian(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds())/1e3, "p99-µs")
}

func BenchmarkLatencyDirect(b *testing.B) {
	srv := firstByteServer(b)
	var ds []time.Duration
	one := make([]byte, 1)
	for b.Loop() {
		start := time.Now()
		c, err := net.Dial("tcp", srv.String())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		c.Close()
	}
	reportMedian(b, ds)
}

func benchLatencyVia(b *testing.B, network, addr string, srv netip.AddrPort) {
	var ds []time.Duration
	one := make([]byte, 1)
	authority := fmt.Sprintf("%s:%d", hostBoth, srv.Port())
	for b.Loop() {
		start := time.Now()
		c, err := net.Dial(network, addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(benchConnect(b, c, authority), one); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		c.Close()
	}
	reportMedian(b, ds)
}

func BenchmarkLatencyCONNECTUnix(b *testing.B) {
	f := benchFixture(b)
	benchLatencyVia(b, "unix", f.ep.Socket, firstByteServer(b))
}

func BenchmarkLatencyCONNECTTCP(b *testing.B) {
	f := benchFixture(b)
	benchLatencyVia(b, "tcp", f.ep.TCP.String(), firstByteServer(b))
}

func BenchmarkLatencyCONNECTBridgeUnix(b *testing.B) {
	f := benchFixture(b)
	benchLatencyVia(b, "tcp", bridgeHop(b, f.ep.Socket), firstByteServer(b))
}
