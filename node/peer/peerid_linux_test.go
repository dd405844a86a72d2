package peer_test

import (
	"net"
	"os"
	"strconv"
	"testing"

	"oz0.ai/node/node/peer"
)

// A loopback TCP peer is told apart by its user, as the kernel's socket
// diagnostics give it, not by its address (every local client shares that).
func TestWhoOfALoopbackTCPPeerIsItsUser(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := "uid " + strconv.Itoa(os.Geteuid())
	if who, client := peer.Who(c); who != want || client != want {
		t.Errorf("Who: %q %q; want %q", who, client, want)
	}
}
