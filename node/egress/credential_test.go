package egress

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/internal/syncbuf"
)

// A host-loopback endpoint is reachable by any local process; only a client that
// presents the plugin's credential may speak through it, over HTTP, CONNECT and
// SOCKS5 alike. The unix socket of the same plugin needs none.
func TestHostLoopbackEndpointNeedsCredential(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	echo := echoServer(t)
	betaCred := "fedcba9876543210fedcba9876543210-beta"
	beta, err := f.p.AddPlugin(PluginRules{Plugin: "beta", Egress: testManifest},
		Listen{Socket: filepath.Join(f.dir, "run", "egress", "beta", "egress.sock"), TCP: true, Credential: betaCred})
	if err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n"
	}
	connect := fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: x\r\n", hostBoth, echo.Port())
	get := fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\n", hostBoth, port(plain))
	send := func(addr, req string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, _ := raw(t, c, req)
		return resp
	}
	alpha := f.ep.TCP.String()
	for _, tc := range []struct {
		name, addr, req string
		want            int
	}{
		{"CONNECT without a credential", alpha, connect + "\r\n", 407},
		{"GET without a credential", alpha, get + "\r\n", 407},
		{"CONNECT with a wrong password", alpha, connect + basic("oz0", testCredential+"x") + "\r\n", 407},
		{"CONNECT with the password cut short", alpha, connect + basic("oz0", testCredential[:len(testCredential)-1]) + "\r\n", 407},
		{"GET with an empty password", alpha, get + basic("oz0", "") + "\r\n", 407},
		{"GET with a bearer token", alpha, get + "Proxy-Authorization: Bearer " + testCredential + "\r\n\r\n", 407},
		{"GET with the credential as the user name", alpha, get + basic(testCredential, "") + "\r\n", 407},
		{"plugin beta's credential on alpha's port", alpha, get + basic("oz0", betaCred) + "\r\n", 407},
		{"plugin alpha's credential on beta's port", beta.TCP.String(), get + basic("oz0", testCredential) + "\r\n", 407},
		{"GET with alpha's credential", alpha, get + basic("oz0", testCredential) + "\r\n", 200},
		{"GET with beta's credential on beta's port", beta.TCP.String(), get + basic("oz0", betaCred) + "\r\n", 200},
	} {
		resp := send(tc.addr, tc.req)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
		if tc.want == 407 && !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic") {
			t.Errorf("%s: 407 without Proxy-Authenticate: Basic (%q)", tc.name, resp.Header.Get("Proxy-Authenticate"))
		}
	}
	// With the credential, CONNECT tunnels.
	c, err := net.Dial("tcp", alpha)
	if err != nil {
		t.Fatal(err)
	}
	br := connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, echo.Port()))
	io.WriteString(c, "tunnel")
	b := make([]byte, 6)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "tunnel" {
		t.Fatalf("tunnel with the credential: %q %v", b, err)
	}
	c.Close()

	// Every request on a kept-alive connection needs it, not just the first.
	c, err = net.Dial("tcp", alpha)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, _ := raw(t, c, get+basic("oz0", testCredential)+"\r\n"); resp.StatusCode != 200 {
		t.Fatalf("first request: %s", resp.Status)
	}
	if resp, _ := raw(t, c, get+"\r\n"); resp.StatusCode != 407 {
		t.Fatalf("second request on the connection without the credential: %s", resp.Status)
	}

	// The plugin's socket, reachable only from its sandboxes, needs none.
	u := f.dialUnix(t)
	if resp, _ := raw(t, u, get+"Connection: close\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("unix socket without a credential: %s", resp.Status)
	}
	u.Close()
	// Nothing got through the refused attempts: 4 allowed in all (two GETs with
	// credentials, the tunnel, the kept-alive GET; beta's counted apart).
	if st, _ := f.p.Stats("alpha"); st.Allowed != 4 {
		t.Fatalf("alpha's allowed count %d, want 4: a refused client reached a host", st.Allowed)
	}
}

// socksGreet sends a SOCKS5 greeting offering methods and returns the method the
// proxy chose.
func socksGreet(t *testing.T, c net.Conn, methods ...byte) (byte, *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(append([]byte{5, byte(len(methods))}, methods...))
	br := bufio.NewReader(c)
	var m [2]byte
	if _, err := io.ReadFull(br, m[:]); err != nil || m[0] != 5 {
		t.Fatalf("socks greeting reply %v %v", m, err)
	}
	return m[1], br
}

// socksUserPassword runs RFC 1929 and returns the status byte (0 = accepted), or
// 0xff when the proxy hung up instead.
func socksUserPassword(t *testing.T, c net.Conn, br *bufio.Reader, user, pass string) byte {
	t.Helper()
	msg := []byte{1, byte(len(user))}
	msg = append(msg, user...)
	msg = append(msg, byte(len(pass)))
	msg = append(msg, pass...)
	c.Write(msg)
	var r [2]byte
	if _, err := io.ReadFull(br, r[:]); err != nil {
		return 0xff
	}
	return r[1]
}

func TestHostLoopbackEndpointSOCKS5NeedsCredential(t *testing.T) {
	f := newFixture(t, true, nil)
	echo := echoServer(t)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", f.ep.TCP.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Offering only "no authentication": no acceptable method.
	if m, _ := socksGreet(t, dial(), socksNoAuth); m != socksNoMethod {
		t.Fatalf("no-auth greeting on the TCP endpoint: method %#x, want 0xff", m)
	}
	// A wrong password (and another plugin's credential) fails the subnegotiation
	// and no request is read.
	for _, pass := range []string{"", "wrong", testCredential + "x", "fedcba9876543210fedcba9876543210-beta"} {
		c := dial()
		m, br := socksGreet(t, c, socksNoAuth, socksUserPass)
		if m != socksUserPass {
			t.Fatalf("method %#x, want username/password", m)
		}
		if st := socksUserPassword(t, c, br, "oz0", pass); st == 0 {
			t.Fatalf("password %q accepted", pass)
		}
		req := []byte{5, 1, 0, socksAtypDomain, byte(len(hostBoth))}
		req = binary.BigEndian.AppendUint16(append(req, hostBoth...), echo.Port())
		c.Write(req)
		if n, _ := br.Read(make([]byte, 10)); n > 0 {
			t.Fatalf("password %q: the proxy answered a request after a failed authentication", pass)
		}
	}
	// The right password: CONNECT through.
	c := dial()
	m, br := socksGreet(t, c, socksUserPass)
	if m != socksUserPass {
		t.Fatalf("method %#x", m)
	}
	if st := socksUserPassword(t, c, br, "oz0", testCredential); st != 0 {
		t.Fatalf("the right password: status %d", st)
	}
	req := []byte{5, 1, 0, socksAtypDomain, byte(len(hostBoth))}
	req = binary.BigEndian.AppendUint16(append(req, hostBoth...), echo.Port())
	c.Write(req)
	var r [10]byte
	if _, err := io.ReadFull(br, r[:]); err != nil || r[1] != socksOK {
		t.Fatalf("socks reply %v %v", r, err)
	}
	io.WriteString(c, "socks")
	b := make([]byte, 5)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "socks" {
		t.Fatalf("echo %q %v", b, err)
	}
	if st, _ := f.p.Stats("alpha"); st.Allowed != 1 {
		t.Fatalf("allowed %d, want 1", st.Allowed)
	}
}

// A host-loopback endpoint is never opened without a credential worth the name.
func TestHostLoopbackEndpointRefusedWithoutCredential(t *testing.T) {
	f := newFixture(t, true, nil)
	for _, cred := range []string{"", "short"} {
		if _, err := f.p.AddPlugin(PluginRules{Plugin: "gamma"}, Listen{TCP: true, Credential: cred}); err == nil {
			t.Errorf("TCP endpoint opened with credential %q", cred)
		}
	}
}

func TestCredentialDerivation(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	a, err := Credential(key, "alpha", "")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Credential(key, "alpha", "")
	if a != again || len(a) < minCredential {
		t.Fatalf("credential %q / %q", a, again)
	}
	seen := map[string]string{a: "alpha/"}
	for _, c := range [][3]string{{"k", "alpha", "s1"}, {"k", "alpha", "s2"}, {"k", "beta", ""}, {"k", "alph", "a"}, {"K", "alpha", ""}} {
		got, err := Credential([]byte(strings.Repeat(c[0], 32)), c[1], c[2])
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[got]; ok {
			t.Fatalf("%v derives the same credential as %s", c, prev)
		}
		seen[got] = c[1] + "/" + c[2]
	}
	if _, err := Credential([]byte("short"), "alpha", ""); err == nil {
		t.Fatal("a short key was accepted")
	}
}

// connectAs tries to connect to a unix socket as uid/gid and says what happened.
func connectAs(t *testing.T, sock string, uid, gid uint32) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\nexcept OSError as e:\n print(e.strerror)\n", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as uid %d: %v %s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// On a root node the egress socket's path is known and its folders traversable
// by every user (plugin users must reach them): with SocketGroup, only the
// plugin's user (and the node) can connect.
func TestSocketGroupOnlyThePluginUserConnects(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: connecting as other users needs root (as in CI)")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("not tested: /usr/bin/python3 is missing")
	}
	f := newFixture(t, true, nil)
	for d := f.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o711) // traversable, as a root node's data folder is
	}
	const plugin = 1_900_000_123
	ep, err := f.p.AddPlugin(PluginRules{Plugin: "gamma"},
		Listen{Socket: filepath.Join(f.dir, "run", "egress", "gamma", "egress.sock"), SocketGroup: plugin})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ep.Socket, &st); err != nil || st.Mode&0o777 != 0o660 || st.Gid != plugin {
		t.Fatalf("socket mode %o group %d (%v), want 0660 in group %d", st.Mode&0o777, st.Gid, err, plugin)
	}
	if got := connectAs(t, ep.Socket, plugin, plugin); got != "connected" {
		t.Errorf("the plugin's user: %s", got)
	}
	if got := connectAs(t, ep.Socket, 65534, 65534); got == "connected" {
		t.Error("another user connected to the plugin's socket")
	}
	// Without a group (alpha's, in the fixture: a plugin that runs as the node's
	// user) only the node's user connects.
	if got := connectAs(t, f.ep.Socket, 65534, 65534); got == "connected" {
		t.Error("another user connected to a socket without a group")
	}
	if got := connectAs(t, f.ep.Socket, plugin, plugin); got == "connected" {
		t.Error("a plugin user connected to another plugin's socket without a group")
	}
}

// The check every request on a host-loopback endpoint pays.
func BenchmarkCredentialCheck(b *testing.B) {
	c, err := newCredential(testCredential)
	if err != nil {
		b.Fatal(err)
	}
	h := strings.TrimSpace(strings.TrimPrefix(testAuthHeader, "Proxy-Authorization:"))
	for b.Loop() {
		if !c.basicOK(h) {
			b.Fatal("refused")
		}
	}
}

// Refused clients are logged, but a local process provoking refusals in a loop
// cannot flood the node's log.
func TestCredentialRefusalsLoggedWithoutFlooding(t *testing.T) {
	var logs syncbuf.Buffer
	f := newFixture(t, true, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", f.ep.TCP.String())
		if err != nil {
			t.Fatal(err)
		}
		if resp, _ := raw(t, c, "CONNECT "+hostBoth+":443 HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 407 {
			t.Fatalf("attempt %d: %s", i, resp.Status)
		}
		c.Close()
	}
	lines := strings.Count(logs.String(), "without the plugin's credential")
	if lines < 1 || lines > 3 {
		t.Fatalf("%d log lines for 50 refusals in well under 3 s, want 1 to 3:\n%s", lines, logs.String())
	}
	if strings.Contains(logs.String(), testCredential) {
		t.Fatal("the credential is in the log")
	}
}
