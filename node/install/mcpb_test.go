package install

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

func bundleBytes(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fixtures.Bundle(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// bundleServer serves MCPB bundles by path on a loopback port, as a download
// site would; set replaces what a path serves.
type bundleServer struct {
	mu    sync.Mutex
	files map[string][]byte
	port  int
}

func newBundleServer(t *testing.T) *bundleServer {
	s := &bundleServer{files: map[string][]byte{}}
	s.port = serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.files[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/zip")
		w.Write(b)
	}), "")
	return s
}

func (s *bundleServer) set(p string, b []byte) {
	s.mu.Lock()
	s.files[p] = b
	s.mu.Unlock()
}

func (s *bundleServer) url(p string) string {
	return fmt.Sprintf("http://bundles.test:%d%s", s.port, p)
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// bundlePlugin is a plugin repository whose mcpServers names refs.
func bundlePlugin(t *testing.T, name string, refs ...string) (string, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": name, "version": "1.0.0", "mcpServers": refs})
	return newRepo(t, "", map[string]string{".claude-plugin/plugin.json": string(b)})
}

// A plugin whose servers are MCPB bundle URLs installs: each bundle is fetched
// through the install's egress proxy (its host alone; a loopback address only
// with the operator's range, else an error naming host, address and flag),
// pinned by SHA-256 in the install record and the ledger, unpacked beneath the
// tree, and its manifest's server (python, node, binary) becomes the plugin's.
func TestMCPBBundlesInstallFromTheirURLs(t *testing.T) {
	srv := newBundleServer(t)
	want := map[string][]byte{}
	for _, n := range []string{"py-echo", "node-echo", "bin-echo"} {
		want[n] = bundleBytes(t, n)
		srv.set("/dl/"+n+".mcpb", want[n])
	}
	repo, _ := bundlePlugin(t, "bundled", srv.url("/dl/py-echo.mcpb"), srv.url("/dl/node-echo.mcpb"), srv.url("/dl/bin-echo.mcpb"))

	out, ok := inHosts(t, newData(t), "bundles.test", Options{Source: repo})
	if ok || !strings.Contains(out, fmt.Sprintf("bundles.test:%d resolves to 127.0.0.1, an address the egress guard refuses", srv.port)) || !strings.Contains(out, "--egress-allow-cidr 127.0.0.1/32") {
		t.Fatalf("a bundle host on a loopback address without the operator's range:\n%s", out)
	}

	d := newData(t)
	if out, ok := inHosts(t, d, "bundles.test", Options{Source: repo, AllowCIDRs: loopback}); !ok {
		t.Fatalf("install:\n%s", out)
	}
	in, err := installed.Lookup(d, "bundled")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Bundles) != 3 {
		t.Fatalf("record bundles %+v", in.Bundles)
	}
	types := map[string]string{"py-echo": "python", "node-echo": "node", "bin-echo": "binary"}
	for _, bd := range in.Bundles {
		if bd.SHA256 != sha(want[bd.Name]) || bd.Size != int64(len(want[bd.Name])) || bd.Type != types[bd.Name] || bd.Server != bd.Name ||
			bd.Dir != manifest.BundleDir+"/"+manifest.BundleID(bd.Source) || bd.Source != srv.url("/dl/"+bd.Name+".mcpb") {
			t.Errorf("record %+v", bd)
		}
	}
	if es := ledger(t, d, "bundled"); len(es) != 1 || len(es[0].Bundles) != 3 || es[0].Bundles[0].SHA256 == "" {
		t.Fatalf("ledger %+v", es)
	}
	m, err := manifest.Load(in.Dir, manifest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Servers) != 3 || m.Server("py-echo") == nil || m.Server("node-echo") == nil || m.Server("bin-echo") == nil {
		t.Fatalf("servers %+v", m.Servers)
	}
	bin := m.Server("bin-echo")
	if fi, err := os.Stat(filepath.Join(in.Dir, strings.TrimPrefix(bin.Command, "${CLAUDE_PLUGIN_ROOT}/"))); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("the binary's entry point %s: %v %v", bin.Command, fi, err)
	}
	if m.UserConfig["greeting"].Default != "hello from the bundle" {
		t.Errorf("the bundle's user_config: %+v", m.UserConfig)
	}
}

// A bundle's bytes are pinned: a #sha256= in its URL that does not match, or
// bytes other than the installed plugin pinned (the same URL now serving
// another bundle), are refused naming both hashes; plugin update (re-resolve)
// takes the new bundle and the record says what it is now.
func TestMCPBBundleHashIsPinned(t *testing.T) {
	srv := newBundleServer(t)
	first, second := bundleBytes(t, "py-echo"), bundleBytes(t, "node-echo")
	srv.set("/t.mcpb", first)

	wrong := strings.Repeat("0", 64)
	repo, _ := bundlePlugin(t, "pinned", srv.url("/t.mcpb")+"#sha256="+wrong)
	out, ok := inHosts(t, newData(t), "bundles.test", Options{Source: repo, AllowCIDRs: loopback})
	if ok || !strings.Contains(out, "MCPB bundle hash mismatch: its bytes have sha256 "+sha(first)+", and the manifest pins "+wrong) {
		t.Fatalf("a wrong pin in the URL:\n%s", out)
	}
	repo, _ = bundlePlugin(t, "pinned", srv.url("/t.mcpb")+"#sha256="+sha(first))
	d := newData(t)
	if out, ok := inHosts(t, d, "bundles.test", Options{Source: repo, AllowCIDRs: loopback}); !ok {
		t.Fatalf("install with the right pin:\n%s", out)
	}

	// The URL without a pin, then the site swaps the bundle.
	plain, _ := bundlePlugin(t, "moved", srv.url("/t.mcpb"))
	d = newData(t)
	if out, ok := inHosts(t, d, "bundles.test", Options{Source: plain, AllowCIDRs: loopback}); !ok {
		t.Fatalf("install:\n%s", out)
	}
	srv.set("/t.mcpb", second)
	c2 := commitFiles(t, plain, map[string]string{"README": "a new commit\n"})
	out, ok = inHosts(t, d, "bundles.test", Options{Source: plain, AllowCIDRs: loopback})
	if ok || !strings.Contains(out, "its bytes have sha256 "+sha(second)+", and the installed plugin pinned "+sha(first)) || !strings.Contains(out, "oz0-node plugin update moved") {
		t.Fatalf("a moved bundle on a plain install:\n%s", out)
	}
	if in, _ := installed.Lookup(d, "moved"); in == nil || in.Commit == c2 {
		t.Fatal("the moved bundle's install replaced the active one")
	}
	if out, ok := inHosts(t, d, "bundles.test", Options{Source: plain, AllowCIDRs: loopback, Reresolve: true}); !ok {
		t.Fatalf("update:\n%s", out)
	}
	in, err := installed.Lookup(d, "moved")
	if err != nil || in.Commit != c2 || len(in.Bundles) != 1 || in.Bundles[0].SHA256 != sha(second) || in.Bundles[0].Name != "node-echo" {
		t.Fatalf("after update: %v %+v", err, in)
	}
}

// zipOf makes a zip from entries (name → content); a name ending in "@link"
// is written as a symlink to its content, one ending in "@lie" declares fewer
// bytes than it holds.
func zipOf(t *testing.T, ents [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		name, body := e[0], e[1]
		h := &zip.FileHeader{Name: name, Method: zip.Store}
		h.SetMode(0o644)
		if n, ok := strings.CutSuffix(name, "@link"); ok {
			h.Name = n
			h.SetMode(os.ModeSymlink | 0o777)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	zw.Close()
	return buf.Bytes()
}

const okManifest = `{"manifest_version": "0.3", "name": "x", "version": "1", "server": {"type": "python", "entry_point": "main.py"}}`

// A bundle is unpacked under the rules of a plugin tree, and one this node
// cannot run is a clear install error: each hostile or unrunnable bundle below
// (shipped in the plugin, so no network is involved) is refused by name and
// nothing is installed.
func TestMCPBBundleUnpackRules(t *testing.T) {
	for _, c := range []struct {
		name string
		zip  []byte
		want string
	}{
		{"dotdot", zipOf(t, [][2]string{{"manifest.json", okManifest}, {"main.py", ""}, {"../../escape", "x"}}), `entry "../../escape": not a plain relative path`},
		{"absolute", zipOf(t, [][2]string{{"manifest.json", okManifest}, {"/etc/cron.d/x", "x"}}), `entry "/etc/cron.d/x": not a plain relative path`},
		{"backslash", zipOf(t, [][2]string{{"manifest.json", okManifest}, {`..\..\x`, "x"}}), `not a plain relative path`},
		{"dot git", zipOf(t, [][2]string{{"manifest.json", okManifest}, {".git/hooks/post-checkout", "x"}}), `not a plain relative path`},
		{"symlink", zipOf(t, [][2]string{{"manifest.json", okManifest}, {"main.py@link", "/etc/passwd"}}), `entry main.py: a symlink`},
		{"twice", zipOf(t, [][2]string{{"manifest.json", okManifest}, {"main.py", "a"}, {"main.py", "b"}}), `entry main.py: create`},
		{"not a zip", []byte("PK not really"), `not a zip archive`},
		{"no manifest", zipOf(t, [][2]string{{"main.py", ""}}), `the bundle has no manifest.json`},
		{"entry missing", zipOf(t, [][2]string{{"manifest.json", okManifest}}), `server.entry_point main.py is not a file of the bundle`},
		{"uv", zipOf(t, [][2]string{{"manifest.json", `{"manifest_version": "0.4", "name": "x", "version": "1", "server": {"type": "uv", "entry_point": "s.py"}}`}, {"s.py", ""}}), `server.type "uv"`},
		{"windows only", zipOf(t, [][2]string{{"manifest.json", `{"manifest_version": "0.3", "name": "x", "version": "1", "server": {"type": "binary", "entry_point": "x.exe"}, "compatibility": {"platforms": ["win32"]}}`}, {"x.exe", ""}}), `its server is for win32`},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo, _ := newRepo(t, "", map[string]string{
				".claude-plugin/plugin.json": `{"name": "hostile-bundle", "version": "1.0.0", "mcpServers": "./dist/b.mcpb"}`,
				"dist/b.mcpb":                string(c.zip),
			})
			d := newData(t)
			installErr(t, d, Options{Source: repo}, c.want)
			if _, err := installed.Lookup(d, "hostile-bundle"); !errors.Is(err, installed.ErrNotInstalled) {
				t.Fatalf("installed: %v", err)
			}
			stagingEmpty(t, d)
		})
	}
	// An entry that holds more than it declares (the bounds are held against
	// the declared sizes): a deflated kilobyte that says it is ten bytes.
	var lied bytes.Buffer
	zw := zip.NewWriter(&lied)
	w, _ := zw.Create("manifest.json")
	w.Write([]byte(okManifest))
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestCompression)
	big := bytes.Repeat([]byte("x"), 1000)
	fw.Write(big)
	fw.Close()
	raw, err := zw.CreateRaw(&zip.FileHeader{Name: "main.py", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(big),
		CompressedSize64: uint64(comp.Len()), UncompressedSize64: 10})
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(comp.Bytes())
	zw.Close()
	repo, _ := newRepo(t, "", map[string]string{
		".claude-plugin/plugin.json": `{"name": "hostile-bundle", "version": "1.0.0", "mcpServers": "./dist/b.mcpb"}`,
		"dist/b.mcpb":                lied.String(),
	})
	installErr(t, newData(t), Options{Source: repo}, "entry main.py: ")

	// A plugin that ships the folder bundles are unpacked into, to pass off a
	// server of its own as the bundle's, is refused.
	repo, _ = newRepo(t, "", map[string]string{
		".claude-plugin/plugin.json": `{"name": "hostile-bundle", "version": "1.0.0", "mcpServers": "./dist/b.mcpb"}`,
		"dist/b.mcpb":                string(bundleBytes(t, "py-echo")),
		manifest.BundleDir + "/" + manifest.BundleID("dist/b.mcpb") + "/manifest.json": okManifest,
	})
	installErr(t, newData(t), Options{Source: repo}, "the plugin ships "+manifest.BundleDir)
}

// A bundle whose runtime the node lacks (a node server, no managed Node.js) is
// an install error naming the runtime, not a server that never starts.
func TestMCPBBundleRuntimeMissingIsAnInstallError(t *testing.T) {
	d := newData(t)
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	rs, _ := installed.LoadRuntimes(d)
	rs.Node, rs.NPM = nil, ""
	b, _ := json.Marshal(rs)
	if err := os.WriteFile(d.Runtimes(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	repo, _ := newRepo(t, "", map[string]string{
		".claude-plugin/plugin.json": `{"name": "node-bundle", "version": "1.0.0", "mcpServers": "./node-echo.mcpb"}`,
		"node-echo.mcpb":             string(bundleBytes(t, "node-echo")),
	})
	installErr(t, d, Options{Source: repo}, "a node server needs Node.js, and this node has no managed Node.js runtime")

	// With one, the same plugin installs from the bundle it ships.
	in := mustInstall(t, newData(t), Options{Source: repo})
	if len(in.Bundles) != 1 || in.Bundles[0].Source != "node-echo.mcpb" || in.Bundles[0].SHA256 != sha(bundleBytes(t, "node-echo")) {
		t.Fatalf("record %+v", in.Bundles)
	}
}
