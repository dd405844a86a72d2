package main

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/datadir"
)

// Egress endpoints carry who speaks (docs/promises.md §3, §13): each server
// of a plugin has an endpoint of its own, where its server-level egress narrows
// the plugin's; a host-loopback port exists only where it is the only way in (auto,
// Seatbelt) and requires the endpoint's credential. The fixture egress-split has
// servers alpha (allowed.test only) and beta (beta.test only); the plugin lists
// both, as does the tenant. Its hook, before a fetch of a URL naming "hookcheck",
// fetches that URL itself and blocks the call with the code it got.

const splitTenant = "allowed.test\nbeta.test\n"

// TestE2EPerServerEgressNarrowsEachServer: a host the plugin may reach but one of
// its servers may not is refused from that server's sandbox, for the running
// server and for exec in its sandbox alike, and the audit log names the server.
func TestE2EPerServerEgressNarrowsEachServer(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) {
			e := newEgressEnvWith(t, backend, "egress-split", []string{"alpha", "beta"})
			defer e.cmd.Process.Signal(syscall.SIGTERM)
			e.tenant(splitTenant)
			p := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
			alphaURL, betaURL := "http://allowed.test:"+p+"/", "http://beta.test:"+p+"/"

			// The running servers, as `run` starts them.
			for _, c := range []struct {
				tool, url string
				ok        bool
			}{
				{"egress-split__fetch_alpha", alphaURL, true},
				{"egress-split__fetch_alpha", betaURL, false},
				{"egress-split__fetch_beta", betaURL, true},
				{"egress-split__fetch_beta", alphaURL, false},
			} {
				out, _ := e.oz("call", c.tool, "--arg", "url="+c.url)
				if c.ok && !strings.HasPrefix(out, "200 ") {
					t.Errorf("%s %s: %q, want 200", c.tool, c.url, out)
				}
				if !c.ok && !strings.Contains(out, "403") {
					t.Errorf("%s %s: %q, want a 403 from the proxy", c.tool, c.url, out)
				}
			}
			// Hooks run in the plugin's sandbox and use the plugin's own endpoint:
			// a host the plugin lists is reached from a hook of either server's tools.
			for _, c := range []struct{ tool, url string }{
				{"egress-split__fetch_alpha", betaURL + "hookcheck"},
				{"egress-split__fetch_beta", alphaURL + "hookcheck"},
			} {
				if out, _ := e.oz("call", c.tool, "--arg", "url="+c.url); !strings.Contains(out, "hook fetched 200") {
					t.Errorf("hook before %s %s: %q, want the hook's own fetch to pass (200)", c.tool, c.url, out)
				}
			}
			// exec in each server's sandbox, beside the running node, over HTTP,
			// CONNECT and SOCKS5.
			for _, c := range []struct {
				server, url string
				want        string
			}{
				{"alpha", alphaURL, "200"}, {"alpha", betaURL, "403"},
				{"beta", betaURL, "200"}, {"beta", alphaURL, "403"},
			} {
				args := []string{"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"}
				out, _ := e.inServer("egress-split", c.server, append(args, c.url)...)
				if strings.TrimSpace(out) != c.want {
					t.Errorf("exec --server %s curl %s: %q, want %s", c.server, c.url, out, c.want)
				}
				tunnel, _ := e.inServer("egress-split", c.server, append(args, "--proxytunnel", c.url)...)
				socks, _ := e.inServer("egress-split", c.server, append(args, "--proxy", "socks5h://127.0.0.1:3128", c.url)...)
				if c.want == "200" && (strings.TrimSpace(tunnel) != "200" || strings.TrimSpace(socks) != "200") {
					t.Errorf("exec --server %s %s: CONNECT %q, SOCKS5 %q, want 200", c.server, c.url, tunnel, socks)
				}
				if c.want == "403" && (strings.TrimSpace(tunnel) == "200" || strings.TrimSpace(socks) == "200") {
					t.Errorf("exec --server %s reached %s: CONNECT %q, SOCKS5 %q", c.server, c.url, tunnel, socks)
				}
			}
			// A server's sandbox holds its own endpoint only: no other server's
			// socket, nor the plugin's own, to speak through instead.
			d, err := datadir.New(e.data)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range [][2]string{{"alpha", "beta"}, {"beta", "alpha"}} {
				script := fmt.Sprintf("test -S /run/oz0-egress/egress.sock && echo own; "+
					"for p in %s %s %s; do test -e $p && echo reaches $p; done; true",
					filepath.Join(d.EgressServerSocketDir("egress-split", c[1]), "egress.sock"),
					"/run/oz0-egress/"+filepath.Base(d.EgressServerSocketDir("egress-split", c[1]))+"/egress.sock",
					filepath.Join(d.EgressSocketDir("egress-split"), "egress.sock"))
				if out, _ := e.inServer("egress-split", c[0], "/bin/sh", "-c", script); strings.TrimSpace(out) != "own" {
					t.Errorf("server %s's sandbox: %q, want its own socket alone", c[0], out)
				}
			}
			// The audit log names the server that was refused, and why.
			found := false
			for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				b, _ := os.ReadFile(filepath.Join(e.data, "logs", "audit.jsonl"))
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, `"server":"beta"`) && strings.Contains(line, `"host":"allowed.test"`) &&
						strings.Contains(line, `"decision":"deny"`) && strings.Contains(line, `"rule":"server"`) {
						found = true
					}
				}
			}
			if !found {
				t.Error("no audit line names server beta refused allowed.test by its server list")
			}
		})
	}
}

// listeningTCP returns the loopback/any TCP ports pid listens on in the host's
// network namespace (sockets it holds in sandboxes' own namespaces are not there).
func listeningTCP(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// sl local rem st tx:rx tr:tm retrnsmt uid timeout inode
			if len(fs) > 9 && fs[3] == "0A" && inodes[fs[9]] {
				out = append(out, fs[1])
			}
		}
	}
	return out
}

// TestE2EStrictOpensNoHostTCPPort: under strict on Linux no plugin endpoint is a
// host TCP port (any local process could use one); under auto exactly the
// endpoints of its servers and of its hooks (the plugin's own) are.
func TestE2EStrictOpensNoHostTCPPort(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) { hostPortsByMode(t, backend) })
	}
}

func hostPortsByMode(t *testing.T, backend string) {
	e := newEgressEnvWith(t, backend, "egress-split", []string{"alpha", "beta"})
	if ports := listeningTCP(t, e.cmd.Process.Pid); len(ports) != 0 {
		t.Errorf("under strict the node listens on host TCP %v", ports)
	}
	st := e.status()
	for _, p := range st.Plugins {
		if p.ProxyPort != 0 {
			t.Errorf("plugin %s has a host proxy port %d under strict", p.Name, p.ProxyPort)
		}
		for _, s := range p.Servers {
			if s.ProxyPort != 0 {
				t.Errorf("server %s/%s has a host proxy port %d under strict", p.Name, s.Name, s.ProxyPort)
			}
		}
	}
	e.stop()

	a := newEgressEnvWith(t, backend, "egress-split", []string{"alpha", "beta"}, "--plugin-sandbox", "auto")
	defer a.stop()
	if ports := listeningTCP(t, a.cmd.Process.Pid); len(ports) != 3 {
		t.Errorf("under auto the node listens on host TCP %v, want one port per server and one for the hooks", ports)
	}
	for _, p := range a.status().Plugins {
		if p.Name == "egress-split" && p.ProxyPort == 0 {
			t.Error("under auto the plugin's own endpoint (its hooks') has no host port")
		}
	}
}

// TestE2EHostLoopbackEndpointsCannotBeBorrowed: under auto a server's endpoint is a
// host-loopback port. Any local process reaching it without that server's
// credential is refused (407 / SOCKS5 authentication failure), with a wrong one or
// another server's too; the server itself, and exec in its sandbox, pass. The
// credential is in no command line, log or status.
func TestE2EHostLoopbackEndpointsCannotBeBorrowed(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) { borrowUnderAuto(t, backend) })
	}
}

func borrowUnderAuto(t *testing.T, backend string) {
	e := newEgressEnvWith(t, backend, "egress-split", []string{"alpha", "beta"}, "--plugin-sandbox", "auto")
	defer e.stop()
	e.tenant(splitTenant)
	p := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
	alphaPort, betaPort := e.serverPort("egress-split", "alpha"), e.serverPort("egress-split", "beta")
	alphaCred, betaCred := e.credential("egress-split", "alpha"), e.credential("egress-split", "beta")
	ownCred := e.credential("egress-split", "") // the plugin's own endpoint's (its hooks')
	if alphaCred == betaCred || alphaCred == ownCred {
		t.Fatal("two endpoints share a credential")
	}
	auth := func(pass string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("oz0:"+pass)) + "\r\n"
	}
	// From this test process: any local process on the host.
	ask := func(port int, req string) string {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
		if err != nil {
			return "dial: " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			return "read: " + err.Error()
		}
		return strconv.Itoa(resp.StatusCode)
	}
	connect := "CONNECT allowed.test:" + p + " HTTP/1.1\r\nHost: allowed.test\r\n"
	get := "GET http://allowed.test:" + p + "/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n"
	for _, c := range []struct {
		name string
		port int
		req  string
		want string
	}{
		{"CONNECT without a credential", alphaPort, connect + "\r\n", "407"},
		{"GET without a credential", alphaPort, get + "\r\n", "407"},
		{"CONNECT with a wrong credential", alphaPort, connect + auth("0000"+alphaCred[4:]) + "\r\n", "407"},
		{"GET with server beta's credential on alpha's port", alphaPort, get + auth(betaCred) + "\r\n", "407"},
		{"CONNECT with alpha's credential on beta's port", betaPort, connect + auth(alphaCred) + "\r\n", "407"},
		{"GET with the plugin's own (hooks') credential on alpha's port", alphaPort, get + auth(ownCred) + "\r\n", "407"},
		{"CONNECT with alpha's credential", alphaPort, connect + auth(alphaCred) + "\r\n", "200"},
		{"GET with alpha's credential", alphaPort, get + auth(alphaCred) + "\r\n", "200"},
		// The credential opens only what the server may reach.
		{"GET beta.test with alpha's credential", alphaPort, "GET http://beta.test:" + p + "/ HTTP/1.1\r\nHost: beta.test\r\n" + auth(alphaCred) + "\r\n", "403"},
	} {
		if got := ask(c.port, c.req); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	// SOCKS5: no authentication is not a method offered; a wrong password fails.
	socks := func(port int, methods []byte, pass string) string {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
		if err != nil {
			return "dial"
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		c.Write(append([]byte{5, byte(len(methods))}, methods...))
		var m [2]byte
		if _, err := io.ReadFull(br, m[:]); err != nil {
			return "greeting: " + err.Error()
		}
		if m[1] != 2 {
			return fmt.Sprintf("method %#x", m[1])
		}
		c.Write(append([]byte{1, 3, 'o', 'z', '0', byte(len(pass))}, pass...))
		var a [2]byte
		if _, err := io.ReadFull(br, a[:]); err != nil || a[1] != 0 {
			return fmt.Sprintf("auth failed %v", a)
		}
		req := append([]byte{5, 1, 0, 3, byte(len("allowed.test"))}, "allowed.test"...)
		pn, _ := strconv.Atoi(p)
		c.Write(binary.BigEndian.AppendUint16(req, uint16(pn)))
		var r [10]byte
		if _, err := io.ReadFull(br, r[:]); err != nil {
			return "reply: " + err.Error()
		}
		return fmt.Sprintf("reply %d", r[1])
	}
	if got := socks(alphaPort, []byte{0}, ""); got != "method 0xff" {
		t.Errorf("SOCKS5 offering no authentication: %s, want no acceptable method", got)
	}
	if got := socks(alphaPort, []byte{0, 2}, "wrong"); !strings.HasPrefix(got, "auth failed") {
		t.Errorf("SOCKS5 with a wrong password: %s", got)
	}
	if got := socks(alphaPort, []byte{2}, betaCred); !strings.HasPrefix(got, "auth failed") {
		t.Errorf("SOCKS5 with beta's password on alpha's port: %s", got)
	}
	if got := socks(alphaPort, []byte{0, 2}, alphaCred); got != "reply 0" {
		t.Errorf("SOCKS5 with alpha's password: %s, want success", got)
	}

	// The server itself and exec in its sandbox pass, with curl over HTTP, CONNECT
	// and SOCKS5 from the proxy variables.
	if out, _ := e.oz("call", "egress-split__fetch_alpha", "--arg", "url=http://allowed.test:"+p+"/"); !strings.HasPrefix(out, "200 ") {
		t.Errorf("server alpha under auto: %q, want 200", out)
	}
	if out, _ := e.oz("call", "egress-split__fetch_beta", "--arg", "url=http://allowed.test:"+p+"/"); !strings.Contains(out, "403") {
		t.Errorf("server beta under auto reached allowed.test: %q", out)
	}
	// Its hook, on the plugin's own port with the plugin's credential, reaches a
	// host the plugin lists that server alpha may not.
	if out, _ := e.oz("call", "egress-split__fetch_alpha", "--arg", "url=http://beta.test:"+p+"/hookcheck"); !strings.Contains(out, "hook fetched 200") {
		t.Errorf("hook under auto: %q, want its own fetch to pass (200)", out)
	}
	for _, extra := range [][]string{nil, {"--proxytunnel"}, {"--proxy", "$ALL_PROXY"}} {
		script := "curl -s -o /dev/null -w %{http_code} --max-time 10 " + strings.Join(extra, " ") + " http://allowed.test:" + p + "/"
		if out, _ := e.inServer("egress-split", "alpha", "/bin/sh", "-c", script); strings.TrimSpace(out) != "200" {
			t.Errorf("exec --server alpha under auto %v: %q, want 200", extra, out)
		}
	}

	// The credentials are in the tools' environment only: not in any process's
	// command line, the node's log, status.json, the status API or the audit log.
	e.oz("status", "--json")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), alphaCred) || strings.Contains(string(b), betaCred) {
			t.Errorf("a credential is in %s: %q", f, b)
		}
	}
	statusOut, _ := e.oz("status", "--json")
	statusFile, _ := os.ReadFile(filepath.Join(e.data, "status.json"))
	time.Sleep(1500 * time.Millisecond) // audit lines are written within ~2 ms; wait well past that on a loaded machine
	audit, _ := os.ReadFile(filepath.Join(e.data, "logs", "audit.jsonl"))
	for what, text := range map[string]string{"node log": e.log.String(), "status": statusOut, "status.json": string(statusFile), "audit log": string(audit)} {
		if strings.Contains(text, alphaCred) || strings.Contains(text, betaCred) {
			t.Errorf("a credential is in the %s", what)
		}
	}
	if !strings.Contains(e.log.String(), "without the plugin's credential") {
		t.Error("the node did not log the refused clients")
	}
}

// borrowScript connects to a unix socket and asks for a URL through it, printing
// the proxy's status line (or the error).
const borrowScript = `
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror); sys.exit(0)
s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % sys.argv[2]).encode())
print(s.recv(200).split(b"\r\n")[0].decode())
`

// TestE2EEgressSocketsCannotBeBorrowed: on a root node the plugin's and its
// servers' egress sockets sit at known paths in folders every user can traverse
// (plugin users must reach them). Another local user connecting to one must not
// speak as the plugin: only the plugin's user (and the node) may connect.
func TestE2EEgressSocketsCannotBeBorrowed(t *testing.T) {
	hasBwrap := false
	for _, b := range backendsForE2E(t) {
		hasBwrap = hasBwrap || b == "bwrap"
	}
	if !hasBwrap {
		t.Skip("not tested: bwrap does not work here")
	}
	e := newEgressEnvWith(t, "bwrap", "egress-split", []string{"alpha", "beta"})
	defer e.stop()
	e.tenant(splitTenant)
	d, err := datadir.New(e.data)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://allowed.test:" + strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port) + "/"
	for _, sock := range []string{
		filepath.Join(d.EgressSocketDir("egress-split"), "egress.sock"),
		filepath.Join(d.EgressServerSocketDir("egress-split", "alpha"), "egress.sock"),
	} {
		// As root (the node's user) the socket answers: the path is right.
		out, err := exec.Command("/usr/bin/python3", "-c", borrowScript, sock, url).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "200") {
			t.Fatalf("root through %s: %q %v", sock, out, err)
		}
		// As another user (nobody) it must not.
		cmd := exec.Command("/usr/bin/python3", "-c", borrowScript, sock, url)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("as nobody: %v %s", err, out)
		}
		if !strings.HasPrefix(string(out), "connect:") {
			t.Errorf("user nobody spoke through %s as the plugin: %q", sock, out)
		}
	}
}
