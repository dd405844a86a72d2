package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	backendlinux "oz0.ai/node/backend_linux"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
)

// A Landlock probe run in this test process (backendsForE2E probes every backend)
// starts this binary as its runner, which must then act as the node's binary does.
func init() { reexec.Init() }

// needLandlock skips where the Landlock tier does not work, naming what was not
// tested.
func needLandlock(t *testing.T) {
	t.Helper()
	if abi := backendlinux.LandlockABI(); abi < 1 {
		t.Skip("not tested: this kernel has no Landlock")
	}
}

// A node on the Landlock tier runs servers and hooks there, and says so: each
// server's sandbox is landlock, as the plugin's user on a root node; a hook
// blocks a call from its own Landlock sandbox; status carries the backend, its
// fleet label and what the tier does not cover; `plugin show` names the backend.
func TestE2ELandlockNode(t *testing.T) {
	needLandlock(t)
	n := newE2E(t, []string{"demo", "claude-hooks"}, "--backend", policy.BackendLandlock)
	s := n.waitState("demo", "main", api.StateRunning)
	if s.Sandbox != policy.BackendLandlock {
		t.Errorf("demo/main sandbox %q, want landlock", s.Sandbox)
	}
	out, err := n.oz("call", "demo__whoami")
	if err != nil {
		t.Fatalf("call: %v\n%s", err, out)
	}
	var who struct {
		UID int      `json:"uid"`
		Env []string `json:"env"`
	}
	if err := json.Unmarshal([]byte(out), &who); err != nil {
		t.Fatalf("whoami output %q: %v", out, err)
	}
	if os.Geteuid() == 0 && who.UID != int(policy.PluginUID("demo")) {
		t.Errorf("demo runs as uid %d, want its plugin uid %d", who.UID, policy.PluginUID("demo"))
	}
	if strings.Contains(out, "OZ0_E2E_CANARY") {
		t.Errorf("the node's environment reached the tool: %v", who.Env)
	}
	n.waitState("claude-hooks", "notes", api.StateRunning)
	out, err = n.oz("call", "claude-hooks__echo", "--arg", "text=forbidden words")
	if err == nil || !strings.Contains(out, "not allowed") {
		t.Errorf("a hook on the Landlock tier did not block: err %v out %q", err, out)
	}
	st := n.status()
	if st.Node.Backend != policy.BackendLandlock || st.Node.Tier != 1 || st.Node.Labels["oz0.ai/backend"] != policy.BackendLandlock {
		t.Errorf("status: tier %d backend %q labels %v, want tier 1 on landlock with its label", st.Node.Tier, st.Node.Backend, st.Node.Labels)
	}
	nc := strings.Join(st.Node.NotCovers, "\n")
	for _, g := range backendlinux.LandlockGaps(0, os.Geteuid() == 0) {
		if !strings.Contains(nc, g.Text) {
			t.Errorf("status does not list the gap %s as not covered:\n%s", g.ID, nc)
		}
	}
	if text, _ := n.oz("status"); !strings.Contains(text, "Landlock tier, no PID namespace") {
		t.Errorf("status (text) does not say what the Landlock tier does not cover:\n%s", text)
	}
	if show, err := n.oz("plugin", "show", "demo"); err != nil || !strings.Contains(show, policy.BackendLandlock) {
		t.Errorf("plugin show does not name the Landlock tier: %v\n%s", err, show)
	}
	if show, err := n.oz("sandbox", "show", "demo"); err != nil || !strings.Contains(show, "on landlock") || !strings.Contains(show, "# Landlock rules") {
		t.Errorf("sandbox show beside a Landlock node does not show its sandbox: %v\n%s", err, show)
	}
}

// Egress on the Landlock tier (docs/promises.md §3): no network namespace, so a
// server's proxy is its endpoint's port on the host's loopback with the
// endpoint's credential in the proxy variables; allowed hosts are reached through
// it, refused ones and the host's loopback are not, and exec beside the running
// node gets the same port and credential.
func TestE2ELandlockEgress(t *testing.T) {
	needLandlock(t)
	e := newEgressEnv(t, policy.BackendLandlock)
	defer e.cmd.Process.Signal(syscall.SIGTERM)
	plainPort := strconv.Itoa(e.plain.Listener.Addr().(*net.TCPAddr).Port)
	tlsPort := strconv.Itoa(e.tls.Listener.Addr().(*net.TCPAddr).Port)
	plainURL := "http://allowed.test:" + plainPort + "/"
	out, err := e.oz("call", "egress-demo__fetch", "--arg", "url="+plainURL)
	if err != nil || !strings.HasPrefix(out, "200 hello from allowed.test") {
		t.Errorf("the running server fetched %s: %v %q", plainURL, err, out)
	}
	for _, url := range []string{"http://tenant-only.test:" + plainPort + "/", "http://127.0.0.1:" + plainPort + "/"} {
		if out, _ := e.oz("call", "egress-demo__fetch", "--arg", "url="+url); !strings.Contains(out, "403") {
			t.Errorf("the server fetched %s: %q, want a 403 from the proxy", url, out)
		}
	}
	port := e.serverPort("egress-demo", "fetcher")
	env, _ := e.inSandbox("/bin/sh", "-c", "echo $HTTPS_PROXY")
	if want := "http://oz0:" + e.credential("egress-demo", "fetcher") + "@127.0.0.1:" + strconv.Itoa(port); strings.TrimSpace(env) != want {
		t.Errorf("exec's proxy variable is %q, want the node's endpoint with its credential", strings.TrimSpace(env))
	}
	if code := e.curlCode("https://allowed.test:" + tlsPort + "/"); code != "200" {
		t.Errorf("curl over CONNECT and TLS through the proxy: %s", code)
	}
	if out, _ := e.inSandbox("sh", "-c", `curl -s -o /dev/null -w "%{http_code}" --max-time 10 --proxy "$ALL_PROXY" `+plainURL); out != "200" {
		t.Errorf("curl over SOCKS5 through the proxy: %q", out)
	}
	if code := e.curlCode("http://tenant-only.test:" + plainPort + "/"); code != "403" {
		t.Errorf("a host in the tenant list only: %s, want 403", code)
	}
	if code := e.curlCode("http://127.0.0.1:"+plainPort+"/", "--noproxy", "*"); code != "000" {
		t.Errorf("the host's loopback server answered %s from the Landlock sandbox without the proxy", code)
	}
	if code := e.curlCode("http://127.0.0.1:"+strconv.Itoa(port)+"/", "--noproxy", "*"); code != "407" {
		t.Errorf("the proxy's own port without the credential answered %s, want 407", code)
	}
}

// Where user namespaces are refused (user.max_user_namespaces=0 in a user
// namespace of the test's own), `run --backend auto` takes the Landlock tier:
// its servers run there, status says so with the landlock-tier finding naming
// the cause, and the fleet label says landlock.
func TestE2EAutoTakesLandlockWhereUsernsRefused(t *testing.T) {
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("not tested: a namespace without user namespaces (mapping every uid needs root)")
	}
	n := newE2E(t, []string{"demo"}, "--backend", "none")
	n.stop()
	n.startCommand(noUsernsCmd(n.bin, "--data-dir", n.data, "run", "--log-format", "text"))
	s := n.waitState("demo", "main", api.StateRunning)
	if s.Sandbox != policy.BackendLandlock {
		t.Errorf("demo/main runs in %q where user namespaces are refused, want landlock", s.Sandbox)
	}
	if out, err := n.oz("call", "demo__whoami"); err != nil || !strings.Contains(out, strconv.Itoa(int(policy.PluginUID("demo")))) {
		t.Errorf("call on the Landlock tier: %v %q", err, out)
	}
	st := n.status()
	if st.Node.Backend != policy.BackendLandlock || st.Node.Labels["oz0.ai/backend"] != policy.BackendLandlock || st.Node.Tier != 1 {
		t.Errorf("status: tier %d backend %q label %q", st.Node.Tier, st.Node.Backend, st.Node.Labels["oz0.ai/backend"])
	}
	found := false
	for _, f := range st.Findings {
		if f.Code == api.CodeLandlockTier {
			found = true
			if !strings.Contains(f.Message, "user.max_user_namespaces is 0") || !strings.Contains(f.Fix, "sysctl -w user.max_user_namespaces=") {
				t.Errorf("the landlock-tier finding does not name the cause and its fix: %+v", f)
			}
		}
	}
	if !found {
		t.Errorf("no %s finding: %+v", api.CodeLandlockTier, st.Findings)
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
}

// A Landlock sandbox runs no egress bridge, so a node binary its plugin's user
// cannot read (installed under a private folder) does not cost the plugin its
// user: the server runs as the plugin's uid, where it would otherwise fall back
// to the node's user, which the Landlock tier never runs a tool as on a root node.
func TestE2ELandlockNeedsNoReadableNodeBinary(t *testing.T) {
	needLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("not tested: per-plugin users need a root node")
	}
	n := newE2E(t, []string{"demo"}, "--backend", "none")
	n.stop()
	private := t.TempDir() // 0700, root's
	bin := filepath.Join(private, "oz0-node")
	b, err := os.ReadFile(n.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o700); err != nil {
		t.Fatal(err)
	}
	n.bin = bin
	n.start("--backend", policy.BackendLandlock)
	s := n.waitState("demo", "main", api.StateRunning)
	if s.Sandbox != policy.BackendLandlock || s.UID != int(policy.PluginUID("demo")) {
		t.Errorf("demo/main runs in %q as uid %d (%s), want landlock as the plugin's uid %d", s.Sandbox, s.UID, s.User, policy.PluginUID("demo"))
	}
}
