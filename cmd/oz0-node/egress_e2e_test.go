package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
)

// Egress from inside real sandboxes (docs/promises.md §3): the node runs
// in a private mount namespace whose /etc/hosts names loopback test servers
// (allowed.test and friends), so the proxy resolves them as it would real hosts
// while nothing on the machine changes; --egress-allow-cidr 127.0.0.0/8 opens the
// loopback range the SSRF guard otherwise refuses. Inside the sandbox, curl and
// Python reach the network only through the node's proxy.

type egressEnv struct {
	*e2eNode
	plain   *httptest.Server // http://allowed.test:PORT
	tls     *httptest.Server // https://allowed.test:PORT
	backend string
	// cred, when set, is the unprivileged user exec runs as (a non-root node's).
	cred *syscall.Credential
	// stolen counts the requests that reached /steal on the test servers.
	stolen *atomic.Int64
}

func (e *egressEnv) tenant(list string) {
	e.t.Helper()
	tmp := filepath.Join(e.data, "tenant", ".egress.new")
	if err := os.WriteFile(tmp, []byte(list), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.data, "tenant", "egress")); err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the proxy applies a change within ~20 ms
}

// inSandbox runs a command in egress-demo's sandbox (exactly its server's) and
// returns its stdout and exit code.
func (e *egressEnv) inSandbox(args ...string) (string, int) {
	e.t.Helper()
	return e.inServer("egress-demo", "", args...)
}

// inServer runs a command in the sandbox of a plugin's server ("" its first).
func (e *egressEnv) inServer(plugin, server string, args ...string) (string, int) {
	e.t.Helper()
	pre := []string{"--data-dir", e.data, "exec", plugin, "--backend", e.backend}
	if server != "" {
		pre = append(pre, "--server", server)
	}
	cmd := exec.Command(e.bin, append(append(pre, "--"), args...)...)
	if e.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + e.data}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("exec: %v", err)
	}
	if code != 0 {
		e.t.Logf("exec %v: exit %d, stderr: %s", args, code, errb.String())
	}
	return out.String(), code
}

// curlCode fetches a URL with curl inside the sandbox and returns the HTTP status
// curl saw (000 when the connection failed).
func (e *egressEnv) curlCode(url string, extra ...string) string {
	e.t.Helper()
	args := append([]string{"curl", "-s", "-k", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"}, extra...)
	out, _ := e.inSandbox(append(args, url)...)
	return strings.TrimSpace(out)
}

const rawRequest = `
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(sys.argv[1].encode() + b"\r\nHost: x\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
`

func newEgressEnv(t *testing.T, backend string, runArgs ...string) *egressEnv {
	t.Helper()
	return newEgressEnvWith(t, backend, "egress-demo", []string{"fetcher"}, runArgs...)
}

// newEgressEnvWith installs plugin and waits for its servers to run.
func newEgressEnvWith(t *testing.T, backend, plugin string, servers []string, runArgs ...string) *egressEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not tested: the private mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("not tested: curl is not installed (CI installs it)")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from allowed.test") })
	stolen := &atomic.Int64{}
	mux.HandleFunc("/steal", func(w http.ResponseWriter, r *http.Request) { stolen.Add(1); io.WriteString(w, "got it") })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 200; i++ { // ~12 MiB over ~10 s unless cut
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	})
	e := &egressEnv{plain: httptest.NewServer(mux), tls: httptest.NewTLSServer(mux), backend: backend, stolen: stolen}
	t.Cleanup(e.plain.Close)
	t.Cleanup(e.tls.Close)

	e.e2eNode = newE2E(t, []string{plugin}, "--backend", "none")
	e.stop()
	hosts := filepath.Join(filepath.Dir(e.data), "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 localhost allowed.test tenant-only.test beta.test\n::1 localhost\n"), 0o644)
	e.tenant("# test tenant list\nallowed.test\ntenant-only.test\n")
	e.restartEgress(runArgs...)
	for _, s := range servers {
		e.waitState(plugin, s, api.StateRunning)
	}
	return e
}

// restartEgress starts the (stopped) node again in a private mount namespace
// whose /etc/hosts names the test servers, with runArgs added to its flags.
func (e *egressEnv) restartEgress(runArgs ...string) {
	e.t.Helper()
	hosts := filepath.Join(filepath.Dir(e.data), "hosts")
	script := fmt.Sprintf("mount --bind %s /etc/hosts && exec %s --data-dir %s run --log-format text --backend %s --egress-allow-cidr 127.0.0.0/8 %s",
		hosts, e.bin, e.data, e.backend, strings.Join(runArgs, " "))
	e.startCommand(exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script))
}

// startCommand starts the node with a wrapper command and waits for its socket.
func (n *e2eNode) startCommand(cmd *exec.Cmd) {
	n.t.Helper()
	n.cmd = cmd
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(n.data, "run", "control.sock")); err == nil {
			if out, err := n.oz("status"); err == nil && strings.Contains(out, "tier") {
				return
			}
		}
		select {
		case <-n.exited:
			n.t.Fatalf("node exited:\n%s", n.log.String())
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("node did not come up:\n%s", n.log.String())
}

func TestE2EEgressFromInsideSandboxes(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) {
			e := newEgressEnv(t, backend)
			plainPort := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
			tlsPort := strconv.Itoa(e.tls.Listener.Addr().(*net.TCPAddr).Port)
			plainURL := "http://allowed.test:" + plainPort + "/"
			tlsURL := "https://allowed.test:" + tlsPort + "/"

			t.Run("allowed host over plain HTTP with Python", func(t *testing.T) {
				out, err := e.oz("call", "egress-demo__fetch", "--arg", "url="+plainURL)
				if err != nil || !strings.HasPrefix(out, "200 hello from allowed.test") {
					t.Errorf("fetch %s: %v %q", plainURL, err, out)
				}
			})
			// The running server reaches the proxy the way `run` sets up (on a root
			// node under bwrap: a listener the node opened in the sandbox's network
			// namespace; under gVisor: the bridge), so refusals are checked there too.
			t.Run("the running server's refusals", func(t *testing.T) {
				for _, url := range []string{
					"http://tenant-only.test:" + plainPort + "/",
					"http://169.254.169.254/latest/meta-data/",
					"http://127.0.0.1:" + plainPort + "/",
				} {
					out, _ := e.oz("call", "egress-demo__fetch", "--arg", "url="+url)
					if !strings.Contains(out, "403") {
						t.Errorf("the server fetched %s: %q, want a 403 from the proxy", url, out)
					}
				}
			})
			t.Run("allowed host over CONNECT and TLS with curl", func(t *testing.T) {
				if code := e.curlCode(tlsURL); code != "200" {
					t.Errorf("curl %s through the proxy: %s", tlsURL, code)
				}
			})
			t.Run("allowed host over SOCKS5 with curl", func(t *testing.T) {
				if code := e.curlCode(plainURL, "--proxy", "socks5h://127.0.0.1:3128"); code != "200" {
					t.Errorf("curl over SOCKS5: %s", code)
				}
			})
			t.Run("the host's loopback is out of reach without the proxy", func(t *testing.T) {
				// The test server listens on the host's 127.0.0.1; the sandbox's own
				// loopback holds only the node's proxy endpoint.
				if code := e.curlCode("http://127.0.0.1:"+plainPort+"/", "--noproxy", "*"); code != "000" {
					t.Errorf("the host's loopback server answered %s from inside the sandbox", code)
				}
			})
			t.Run("host in the tenant list only is refused", func(t *testing.T) {
				if code := e.curlCode("http://tenant-only.test:" + plainPort + "/"); code != "403" {
					t.Errorf("tenant-only host: %s, want 403", code)
				}
			})
			t.Run("host in the manifest only is refused", func(t *testing.T) {
				if code := e.curlCode("https://api.example.com/"); code != "000" && code != "403" {
					t.Errorf("manifest-only host: %s, want a refused CONNECT", code)
				}
				out, _ := e.inSandbox("python3", "-c", rawRequest, "CONNECT api.example.com:443 HTTP/1.1")
				if !strings.Contains(out, "403") {
					t.Errorf("manifest-only CONNECT answered %q", out)
				}
			})
			t.Run("SSRF vectors sent as raw request lines are refused", func(t *testing.T) {
				for _, target := range []string{
					"CONNECT 127.0.0.1:" + plainPort + " HTTP/1.1",
					"CONNECT 2130706433:80 HTTP/1.1",
					"CONNECT 0x7f.1:80 HTTP/1.1",
					"CONNECT 0177.0.0.1:80 HTTP/1.1",
					"CONNECT 127.1:80 HTTP/1.1",
					"CONNECT [::ffff:127.0.0.1]:80 HTTP/1.1",
					"CONNECT 169.254.169.254:80 HTTP/1.1",
					"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1",
					"GET http://[::1]:" + plainPort + "/ HTTP/1.1",
					"GET http://10.0.0.1/ HTTP/1.1",
				} {
					out, _ := e.inSandbox("python3", "-c", rawRequest, target)
					if !strings.Contains(out, " 403") && !strings.Contains(out, " 400") {
						t.Errorf("%s answered %q, want a refusal", target, out)
					}
				}
			})
			t.Run("a redirect to a private address is returned, not followed", func(t *testing.T) {
				out, _ := e.inSandbox("curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "--max-time", "10", plainURL+"redirect")
				if !strings.HasPrefix(out, "302 http://169.254.169.254/") {
					t.Errorf("redirect: %q, want the 302 handed to the client", out)
				}
			})
			t.Run("a host taken off the tenant list loses its open tunnel", func(t *testing.T) {
				done := make(chan string, 1)
				go func() {
					out, _ := e.inSandbox("curl", "-s", "-k", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", "--max-time", "30",
						"https://allowed.test:"+tlsPort+"/slow")
					done <- out
				}()
				time.Sleep(2 * time.Second)
				e.tenant("# allowed.test removed\ntenant-only.test\n")
				start := time.Now()
				select {
				case out := <-done:
					var code string
					var size int
					fmt.Sscan(out, &code, &size)
					if size >= 200*64<<10 {
						t.Errorf("the whole transfer completed (%q) although the host was removed", out)
					}
					t.Logf("transfer cut %s after the list changed: %q", time.Since(start).Round(time.Millisecond), out)
				case <-time.After(20 * time.Second):
					t.Error("the open tunnel was not cut after the host left the tenant list")
				}
				if code := e.curlCode(tlsURL); code != "000" && code != "403" {
					t.Errorf("a new connection to the removed host: %s", code)
				}
				e.tenant("allowed.test\ntenant-only.test\n")
			})
			t.Run("a broken tenant list denies all and recovers", func(t *testing.T) {
				e.tenant("allowed.test\n*\n")
				if code := e.curlCode(plainURL); code != "403" {
					t.Errorf("with a broken list: %s, want 403", code)
				}
				fout, _ := e.oz("findings")
				if !strings.Contains(fout, api.CodeTenantListUnreadable) {
					t.Errorf("no %s finding:\n%s", api.CodeTenantListUnreadable, fout)
				}
				e.tenant("allowed.test\n")
				if code := e.curlCode(plainURL); code != "200" {
					t.Errorf("after fixing the list: %s, want 200", code)
				}
			})
			e.cmd.Process.Signal(syscall.SIGTERM)
		})
	}
}

// Under auto the sandbox keeps the host's network and its proxy variables name the
// endpoint of its server on the host's loopback, with that endpoint's credential.
// oz0-node exec beside a running node must point them at that node's port for the
// server (from its status) and derive the same credential, so the node's decisions
// apply to what exec runs too.
func TestE2EExecUnderAutoUsesTheNodesProxy(t *testing.T) {
	backend := ""
	for _, b := range backendsForE2E(t) {
		if b == "bwrap" {
			backend = b
		}
	}
	if backend == "" {
		t.Skip("not tested: bwrap does not work here")
	}
	e := newEgressEnv(t, backend, "--plugin-sandbox", "auto")
	defer e.cmd.Process.Signal(syscall.SIGTERM)
	port := e.serverPort("egress-demo", "fetcher")
	env, _ := e.inSandbox("/bin/sh", "-c", "echo $HTTP_PROXY")
	if want := "http://oz0:" + e.credential("egress-demo", "fetcher") + "@127.0.0.1:" + strconv.Itoa(port); strings.TrimSpace(env) != want {
		t.Errorf("exec under auto: HTTP_PROXY=%q, want the node's port for the server with its credential", strings.TrimSpace(env))
	}
	plainPort := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
	if code := e.curlCode("http://allowed.test:" + plainPort + "/"); code != "200" {
		t.Errorf("allowed host through the node's proxy: %s, want 200", code)
	}
	if code := e.curlCode("http://tenant-only.test:" + plainPort + "/"); code != "403" {
		t.Errorf("tenant-only host through the node's proxy: %s, want 403", code)
	}
}

// serverPort is the host-loopback port of a server's egress endpoint, from the
// node's status.
func (e *egressEnv) serverPort(plugin, server string) int {
	e.t.Helper()
	for _, p := range e.status().Plugins {
		for _, s := range p.Servers {
			if p.Name == plugin && s.Name == server && s.ProxyPort > 0 {
				return s.ProxyPort
			}
		}
	}
	e.t.Fatalf("status names no proxy port for %s/%s", plugin, server)
	return 0
}

// credential derives an endpoint's credential from the node's key, as the node does.
func (e *egressEnv) credential(plugin, server string) string {
	e.t.Helper()
	d, err := datadir.New(e.data)
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := d.EnsureKey()
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := egress.Credential(k.Seed(), plugin, server)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}
