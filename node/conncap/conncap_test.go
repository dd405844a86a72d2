package conncap_test

import (
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/conncap"
	"oz0.ai/node/node/metrics"
)

// A peer past its cap has its new connection closed as it is accepted, and the
// cap's finding says so; a connection it closes gives its place back.
func TestAPeerPastItsCapIsClosedAtOnce(t *testing.T) {
	var mu sync.Mutex
	var findings []api.Finding
	lim := conncap.New(10, 2, metrics.New().Caps(), func(f api.Finding) {
		mu.Lock()
		defer mu.Unlock()
		findings = append(findings, f)
	})
	raw, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln := lim.Wrap(raw, "test")
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("unix", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held := []net.Conn{}
	for range 2 {
		dial()
		held = append(held, <-accepted)
	}
	over := dial()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("the connection past the peer's cap stayed open: %d %v", n, err)
	}
	select {
	case c := <-accepted:
		t.Fatalf("a connection past the cap was handed on: %v", c)
	default:
	}
	// Raised once the connection is closed: wait for it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(findings)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	if len(findings) != 1 || findings[0].Code != api.CodeConnectionCap || findings[0].Subject != "test" {
		t.Errorf("findings %+v; want one %s for test", findings, api.CodeConnectionCap)
	}
	mu.Unlock()
	held[0].Close()
	held[0].Close() // once given back, however often closed
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a place given back was not taken")
	}
}
