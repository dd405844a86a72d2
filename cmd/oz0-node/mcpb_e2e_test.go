package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// ozInHosts runs oz0-node in a mount namespace of its own whose /etc/hosts names
// the loopback test servers (as real hosts are named), so what it fetches
// resolves as it would on a real network.
func (n *e2eNode) ozInHosts(hosts string, args ...string) (string, error) {
	hf := filepath.Join(filepath.Dir(n.data), "hosts")
	if err := os.WriteFile(hf, []byte("127.0.0.1 localhost "+hosts+"\n::1 localhost\n"), 0o644); err != nil {
		return "", err
	}
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-c", `mount --bind "$1" /etc/hosts && shift && exec "$@"`, "sh", hf, n.bin, "--data-dir", n.data}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A plugin whose servers are MCPB bundle URLs, installed with `plugin install`
// (each bundle fetched from a loopback download site through the install's
// egress proxy, admitted with --egress-allow-cidr) and run by a strict node on
// each backend: the bundles' python, node and binary servers answer calls from
// their sandboxes, as the plugin's user, with no network of their own. After
// the site swaps a bundle, `plugin install` of the plugin again refuses the
// moved bytes, and `plugin update` takes them and says what moved.
func TestE2EMCPBBundlesRunSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the mount namespace with its own /etc/hosts needs root (as in CI)")
	}
	for _, backend := range backendsForE2E(t) {
		if backend != policy.BackendBwrap && backend != policy.BackendGVisor {
			continue
		}
		t.Run(backend, func(t *testing.T) { testMCPBBundles(t, backend) })
	}
}

func testMCPBBundles(t *testing.T, backend string) {
	var mu sync.Mutex
	site := map[string][]byte{}
	for _, name := range fixtures.Bundles() {
		b, err := fixtures.Bundle(name)
		if err != nil {
			t.Fatal(err)
		}
		site["/dl/"+name+".mcpb"] = b
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b, ok := site[r.URL.Path]
		mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := func(name string) string {
		return fmt.Sprintf("http://bundles.test:%d/dl/%s.mcpb", ln.Addr().(*net.TCPAddr).Port, name)
	}

	n := newE2E(t, nil, "--backend", backend)
	n.stop()
	repo := filepath.Join(filepath.Dir(n.data), "repos", "bundled")
	os.MkdirAll(filepath.Join(repo, ".claude-plugin"), 0o755)
	pj, _ := json.Marshal(map[string]any{"name": "bundled", "version": "1.0.0", "mcpServers": []string{url("py-echo"), url("node-echo"), url("bin-echo")}})
	os.WriteFile(filepath.Join(repo, ".claude-plugin", "plugin.json"), pj, 0o644)
	commitRepo(t, repo)

	out, err := n.ozInHosts("bundles.test", "plugin", "install", repo, "--by", "e2e", "--egress-allow-cidr", "127.0.0.1/32")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, name := range []string{"py-echo", "node-echo", "bin-echo"} {
		s := sha256.Sum256(site["/dl/"+name+".mcpb"])
		if want := "bundle " + url(name) + ": " + name; !strings.Contains(out, want) || !strings.Contains(out, hex.EncodeToString(s[:])) {
			t.Errorf("install output does not name %s with its sha256:\n%s", name, out)
		}
	}

	n.start("--backend", backend)
	for _, c := range []struct{ server, tool, args, want string }{
		{"py-echo", "py_echo", "text=from python", "from python"},
		{"node-echo", "node_echo", "text=from node", "from node"},
		{"bin-echo", "bin_echo", "text=from a binary", "from a binary"},
		{"py-echo", "getenv", "name=BUNDLE_GREETING", "hello from the bundle"},
	} {
		s := n.waitState("bundled", c.server, api.StateRunning)
		if s.Sandbox != backend {
			t.Errorf("%s runs in %q, want %s", c.server, s.Sandbox, backend)
		}
		out, err := n.oz("call", "bundled__"+c.tool, "--arg", c.args)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("call %s: %v\n%s", c.tool, err, out)
		}
	}
	// No network of its own: the bundle's own download site is out of reach.
	if out, err := n.oz("call", "bundled__fetch", "--arg", "url="+url("py-echo")); err == nil && !strings.Contains(out, "Error") {
		t.Errorf("a bundle's server reached the network:\n%s", out)
	}
	n.stop()

	// The site swaps a bundle: a plain install refuses the moved bytes; update
	// takes them and says what moved.
	mu.Lock()
	site["/dl/node-echo.mcpb"] = withVersion(t, site["/dl/node-echo.mcpb"], "2.1.0")
	mu.Unlock()
	os.WriteFile(filepath.Join(repo, "README"), []byte("a new commit\n"), 0o644)
	commitRepo(t, repo)
	out, err = n.ozInHosts("bundles.test", "plugin", "install", repo, "--by", "e2e", "--egress-allow-cidr", "127.0.0.1/32")
	if err == nil || !strings.Contains(out, "MCPB bundle hash mismatch") || !strings.Contains(out, "oz0-node plugin update bundled") {
		t.Fatalf("install of moved bytes: %v\n%s", err, out)
	}
	out, err = n.ozInHosts("bundles.test", "plugin", "update", "bundled", "--egress-allow-cidr", "127.0.0.1/32")
	if err != nil || !strings.Contains(out, "bundle "+url("node-echo")+": node-echo 2.0.0 -> node-echo 2.1.0, sha256 ") || !strings.Contains(out, "bundle "+url("py-echo")+": py-echo 1.0.0 unchanged") {
		t.Fatalf("update: %v\n%s", err, out)
	}
}

// withVersion is bundle b with its manifest's version set to v.
func withVersion(t *testing.T, b []byte, v string) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		rc, _ := f.Open()
		data, _ := io.ReadAll(rc)
		rc.Close()
		if f.Name == "manifest.json" {
			var m map[string]any
			json.Unmarshal(data, &m)
			m["version"] = v
			data, _ = json.Marshal(m)
		}
		h := f.FileHeader
		w, err := zw.CreateHeader(&h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	zw.Close()
	return out.Bytes()
}
