package egress

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fdsTo counts this process's descriptors that refer to one of the open files
// of files (a pipe's or socket's inode, as /proc/self/fd names it): the test's
// own, plus any copy the proxy still holds of what it was sent. Descriptors the
// package's other work opens meanwhile are not counted.
func fdsTo(t *testing.T, files ...*os.File) int {
	t.Helper()
	targets := map[string]bool{}
	for _, f := range files {
		if f == nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err == nil {
			targets[l] = true
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && targets[l] {
			n++
		}
	}
	return n
}

// sendRaw sends data with the given descriptors over a new connection to the
// plugin's socket and returns the first line of the answer.
func sendRaw(t *testing.T, f *fixture, data string, fds ...int) string {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: f.ep.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix([]byte(data), oob, nil); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, _ := c.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	return line
}

// handOffListener opens a loopback listener, hands it to the fixture's proxy as a
// bridge does (closing its own copy) and returns its address and the handoff
// connection that keeps it served.
func handOffListener(t *testing.T, f *fixture) (string, *net.UnixConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hc, err := HandOff(ln.(*net.TCPListener), f.ep.Socket)
	if err != nil {
		t.Fatalf("handoff: %v", err)
	}
	ln.Close() // the proxy holds it now
	return ln.Addr().String(), hc
}

// accepts reports whether something still listens at addr.
func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// A bridge's listener handed to the proxy is served as the endpoint it came
// through (the plugin's rules and name), and let go when the bridge's handoff
// connection ends.
func TestHandoffServesTheListener(t *testing.T) {
	f := newFixture(t, true, nil)
	addr, hc := handOffListener(t, f)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the handed-off listener does not accept: %v", err)
	}
	resp, body := raw(t, c, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
	c.Close()
	if resp.StatusCode != 403 || !strings.Contains(body, "manifest") {
		t.Errorf("a tenant-only host through the handed-off listener: %d %q, want the plugin's 403", resp.StatusCode, body)
	}
	if st, _ := f.p.Stats("alpha"); st.Denied != 1 {
		t.Errorf("alpha's denials: %d, want the one made through the handed-off listener", st.Denied)
	}

	hc.Close()
	eventually(t, 5*time.Second, "the listener closed after the bridge let go", func() bool { return !accepts(addr) })
}

// Only a listening IPv4 TCP socket on loopback is taken; anything else passed in
// is refused and closed, and descriptors sent along with an ordinary request are
// closed at once: a plugin cannot make the node hold its descriptors.
func TestHandoffRefusesOtherDescriptors(t *testing.T) {
	f := newFixture(t, true, nil)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	udpFile, _ := udp.(*net.UDPConn).File()
	defer udpFile.Close()
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := net.Dial("tcp", peer.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	connFile, _ := conn.(*net.TCPConn).File()
	defer connFile.Close()
	v6, err := net.Listen("tcp", "[::1]:0")
	var v6File *os.File
	if err == nil {
		defer v6.Close()
		v6File, _ = v6.(*net.TCPListener).File()
		defer v6File.Close()
	}
	good, _ := net.Listen("tcp", "127.0.0.1:0")
	defer good.Close()
	goodFile, _ := good.(*net.TCPListener).File()
	defer goodFile.Close()

	sent := []*os.File{w, udpFile, connFile, v6File, goodFile}
	before := fdsTo(t, sent...)
	cases := []struct {
		name string
		data string
		fds  []int
		want string
	}{
		{"a pipe", handoffMagic, []int{int(w.Fd())}, "refused: not a socket"},
		{"a UDP socket", handoffMagic, []int{int(udpFile.Fd())}, "refused: not a stream socket"},
		{"a connected TCP socket", handoffMagic, []int{int(connFile.Fd())}, "refused: not a listening socket"},
		{"two listeners", handoffMagic, []int{int(goodFile.Fd()), int(goodFile.Fd())}, "refused: 2 descriptors"},
		{"no descriptor", handoffMagic, nil, "refused: 0 descriptors"},
		{"a bad message", "\x00oz0-handover\n", []int{int(goodFile.Fd())}, "refused: malformed"},
		{"a descriptor with a request", "CONNECT " + hostTenant + ":443 HTTP/1.1\r\n\r\n", []int{int(goodFile.Fd())}, "HTTP/1.1 403"},
	}
	if v6File != nil {
		cases = append(cases, struct {
			name string
			data string
			fds  []int
			want string
		}{"an IPv6 listener", handoffMagic, []int{int(v6File.Fd())}, "refused: not an IPv4 socket"})
	}
	for _, c := range cases {
		if got := sendRaw(t, f, c.data, c.fds...); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: answered %q, want %q", c.name, got, c.want)
		}
	}
	// Every descriptor the proxy received was closed again.
	eventually(t, 5*time.Second, "descriptors back to where they were", func() bool { return fdsTo(t, sent...) <= before })
}

// A plugin can make the node hold only so many handed-off listeners.
func TestHandoffLimit(t *testing.T) {
	f := newFixture(t, true, nil)
	var keep []*net.UnixConn
	defer func() {
		for _, c := range keep {
			c.Close()
		}
	}()
	for i := 0; i <= maxHandoffsPerPlugin; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hc, err := HandOff(ln.(*net.TCPListener), f.ep.Socket)
		ln.Close()
		if i < maxHandoffsPerPlugin {
			if err != nil {
				t.Fatalf("handoff %d: %v", i+1, err)
			}
			keep = append(keep, hc)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "already has") {
			t.Errorf("handoff %d beyond the limit: %v, want a refusal", i+1, err)
		}
	}
}

// A unix-socket client that sends nothing is closed at the header timeout (the
// first read, which also looks for passed descriptors, ends in an error).
func TestUnixClientSilentUntilTimeout(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.HeaderTimeout = 100 * time.Millisecond })
	c := f.dialUnix(t)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil || n != 0 {
		t.Errorf("a silent client got %d bytes, %v; want the connection closed", n, err)
	}
}

// Anything sent on the handoff connection after it was taken ends it: it is a
// holder, not a channel.
func TestHandoffEndsOnData(t *testing.T) {
	f := newFixture(t, true, nil)
	addr, hc := handOffListener(t, f)
	defer hc.Close()
	hc.Write([]byte("more"))
	eventually(t, 5*time.Second, "the listener closed after data on the handoff connection", func() bool { return !accepts(addr) })
}
