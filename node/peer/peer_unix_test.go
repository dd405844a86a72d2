//go:build linux || darwin

package peer_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"oz0.ai/node/node/peer"
)

// wrapped is a connection the node wrapped, as the listeners' caps wrap theirs.
type wrapped struct{ net.Conn }

func (w wrapped) Unwrap() net.Conn { return w.Conn }

// The user at the other end of a unix socket is the one the kernel recorded,
// through any wrapping of the connection.
func TestUIDOfAUnixSocketPeer(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("unix", ln.Addr().String())
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
	uid, err := peer.UID(wrapped{c})
	if err != nil || uid != os.Geteuid() {
		t.Fatalf("UID: %d %v; want %d", uid, err, os.Geteuid())
	}
	who, client := peer.Who(wrapped{c})
	if who != "unix" && who != "uid "+strconv.Itoa(os.Geteuid()) {
		t.Errorf("Who: %q", who)
	}
	if !strings.HasPrefix(client, who) {
		t.Errorf("client %q does not name its peer %q", client, who)
	}
}

// A TCP connection has no peer credentials: UID refuses it.
func TestUIDRefusesATCPPeer(t *testing.T) {
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
	if uid, err := peer.UID(c); err == nil {
		t.Errorf("UID of a TCP peer: %d", uid)
	}
}
