package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// 10,000 connections of every kind (tunnels, forwarded requests, denials, SOCKS,
// clients that hang up early) leave no goroutine behind.
func TestNoGoroutineLeakAfter10000Connections(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 10,000-connection leak test did not run")
	}
	f := newFixture(t, true, func(c *Config) { c.MaxConnsPerPlugin = 1000 })
	echo := echoServer(t)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	// Let the fixture's goroutines settle before counting.
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()

	const total, workers = 10000, 16
	var next, failures atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				if err := oneConn(f, int(i), echo.Port(), port(plain)); err != nil {
					if failures.Add(1) < 5 {
						t.Errorf("connection %d: %v", i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d connections failed", n, total)
	}
	eventually(t, 5*time.Second, "every connection closed", func() bool {
		st, _ := f.p.Stats("alpha")
		return st.Open == 0
	})
	// Idle upstream keep-alive connections are the transport's, not a leak.
	f.p.transport.CloseIdleConnections()
	plain.CloseClientConnections()
	var after int
	deadline := time.Now().Add(5 * time.Second)
	for {
		after = runtime.NumGoroutine()
		if after <= before+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines before %d, after %d connections %d", before, total, after)
	if after > before+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after %d connections\n%s", before, after, total, buf[:runtime.Stack(buf, true)])
	}
}

func oneConn(f *fixture, i int, echoPort uint16, httpPort string) error {
	c, err := net.Dial("unix", f.ep.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	switch i % 5 {
	case 0: // tunnel with an echo
		fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\n\r\n", hostBoth, echoPort)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("CONNECT: %v %v", resp, err)
		}
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil {
			return err
		}
	case 1: // forwarded request
		fmt.Fprintf(c, "GET http://%s:%s/x HTTP/1.1\r\nConnection: close\r\n\r\n", hostBoth, httpPort)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			return fmt.Errorf("GET: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	case 2: // denied
		fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 403 {
			return fmt.Errorf("denied CONNECT: %v %v", resp, err)
		}
	case 3: // SOCKS tunnel
		c.Write([]byte{5, 1, 0, 5, 1, 0, socksAtypDomain, byte(len(hostBoth))})
		c.Write(append([]byte(hostBoth), byte(echoPort>>8), byte(echoPort)))
		r := make([]byte, 12)
		if _, err := io.ReadFull(br, r); err != nil || r[3] != socksOK {
			return fmt.Errorf("socks: %v %v", r, err)
		}
	case 4: // hangs up half-way through the request line
		io.WriteString(c, "CONNECT "+hostBoth)
	}
	return nil
}

// 1,000 tunnels open at once all work.
func TestThousandConcurrentTunnels(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 1,000-tunnel test did not run")
	}
	f := newFixture(t, true, func(c *Config) { c.MaxConnsPerPlugin = 1100 })
	echo := echoServer(t)
	const n = 1000
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		var c net.Conn
		var err error
		if i%2 == 0 {
			c, err = net.Dial("unix", f.ep.Socket)
		} else {
			c, err = net.Dial("tcp", f.ep.TCP.String())
		}
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		defer c.Close()
		conns[i] = c
		readers[i] = connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, echo.Port()))
	}
	if st, _ := f.p.Stats("alpha"); st.Open != n {
		t.Fatalf("open %d, want %d", st.Open, n)
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("tunnel %04d", i)
			conns[i].SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(conns[i], msg)
			b := make([]byte, len(msg))
			if _, err := io.ReadFull(readers[i], b); err != nil || string(b) != msg {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d tunnels failed", failed.Load(), n)
	}
}

// Close leaves nothing running: watcher, audit writer, accept loops, connections.
func TestCloseStopsEverything(t *testing.T) {
	time.Sleep(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		f := newFixture(t, true, nil)
		c := f.dialUnix(t)
		io.WriteString(c, "CONNECT "+hostBoth) // a handler waiting for the rest
		done := make(chan struct{})
		go func() { f.p.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close blocked on an open connection")
		}
		c.Close()
		if _, err := f.p.AddPlugin(PluginRules{Plugin: "late"}, Listen{TCP: true, Credential: testCredential}); err == nil {
			t.Fatal("AddPlugin after Close")
		}
	}
	var after int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines %d before, %d after 20 proxies closed\n%s", before, after, buf[:runtime.Stack(buf, true)])
}

// Two proxies (a node and an `oz0-node exec` serving its own endpoint) appending
// to one audit stream never split each other's lines and share one numbering.
func TestAuditSharedByTwoProxies(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "audit.jsonl")
	a := newFixture(t, true, func(c *Config) { c.AuditPath = shared })
	b := newFixture(t, true, func(c *Config) { c.AuditPath = shared })
	const each = 1500
	var wg sync.WaitGroup
	for _, f := range []*fixture{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				c, err := net.Dial("unix", f.ep.Socket)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(c, "CONNECT h%s-%d.example.com:443 HTTP/1.1\r\n\r\n", strings.Repeat("x", i%50), i)
				io.Copy(io.Discard, c)
				c.Close()
			}
		}()
	}
	wg.Wait()
	a.p.Close()
	b.p.Close()
	data, err := os.ReadFile(shared)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2*each {
		t.Fatalf("%d lines, want %d", len(lines), 2*each)
	}
	for i, l := range lines {
		var d api.AuditRecord
		if err := json.Unmarshal([]byte(l), &d); err != nil || d.Kind != "egress" || d.Decision != "deny" || d.Seq != uint64(i+1) {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
	}
}
