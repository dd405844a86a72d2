package install

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// gitHTTP serves the bare repositories under root over git's smart HTTP
// protocol (git http-backend, as a git host runs it) on a loopback port, and
// returns that port.
func gitHTTP(t *testing.T, root string) int {
	t.Helper()
	return serveHTTP(t, nil, root)
}

// serveHTTP serves h on a loopback port (git http-backend over root when h is
// nil) and returns the port.
func serveHTTP(t *testing.T, h http.Handler, root string) int {
	t.Helper()
	backend := ""
	for _, p := range []string{"/usr/lib/git-core/git-http-backend", "/usr/libexec/git-core/git-http-backend"} {
		if _, err := os.Stat(p); err == nil {
			backend = p
		}
	}
	if backend == "" {
		t.Skip("no git http-backend here: submodules over http are not tested")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"}}
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// inHosts runs one install in a child process whose /etc/hosts (in a mount
// namespace of its own) names the loopback test servers, as real hosts are
// named: the install's egress proxy resolves them as it would any host. It
// returns the child's stderr and whether it succeeded.
func inHosts(t *testing.T, d datadir.Dir, hosts string, o Options, env ...string) (string, bool) {
	t.Helper()
	return inHostsSpec(t, hosts, childSpec{Data: d.Root, Install: &o}, env...)
}

// inHostsSpec is inHosts for a whole child spec.
func inHostsSpec(t *testing.T, hosts string, spec childSpec, env ...string) (string, bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: the mount namespace with its own /etc/hosts is not made; fetches by host name not tested")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare: fetches by host name not tested")
	}
	hf := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hf, []byte("127.0.0.1 localhost "+hosts+"\n::1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(spec)
	c := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$1" /etc/hosts && exec "$2" -test.run='^$'`, "sh", hf, os.Args[0])
	c.Env = append(append(os.Environ(), childEnv+"="+string(b)), env...)
	var errb strings.Builder
	c.Stderr = &errb
	err := c.Run()
	return errb.String(), err == nil
}

// vendored makes the shape of a published plugin that vendors a frontend: a
// bare repository served over http (its tip one commit past the one pinned),
// and a plugin repository whose tree pins that commit at third_party/frontend.
// url is what .gitmodules says ("" writes the served URL).
func vendored(t *testing.T, port int, url string) (plugin, pinned, served string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "srv")
	work, pinned := newRepo(t, "", map[string]string{"index.html": "<p>frontend</p>\n", "js/app.js": "console.log(1)\n"})
	commitFiles(t, work, map[string]string{"LATER": "after the pin\n"})
	os.MkdirAll(root, 0o755)
	run(t, root, "git", "clone", "-q", "--bare", work, filepath.Join(root, "frontend.git"))
	served = fmt.Sprintf("http://frontend.test:%d/frontend.git", port)
	if url == "" {
		url = served
	}
	plugin, _ = newRepo(t, "submodule-ignored", map[string]string{
		".gitmodules": "[submodule \"third_party/frontend\"]\n\tpath = third_party/frontend\n\turl = " + url + "\n",
	})
	run(t, plugin, "git", "update-index", "--add", "--cacheinfo", "160000,"+pinned+",third_party/frontend")
	run(t, plugin, "git", "commit", "-q", "-m", "vendor the frontend")
	return plugin, pinned, root
}

// A repository with a git submodule its server never reads installs: by
// default the submodule is left out (an empty folder), with a warning naming it
// in the install record and the ledger. Today's refusal ("plugins with
// submodules are not supported") is gone.
func TestSubmoduleLeftOutByDefault(t *testing.T) {
	plugin, _, _ := vendored(t, 1, "../frontend.git")
	d := newData(t)
	var logb strings.Builder
	o := Options{Source: plugin}
	o.Log = slogTo(&logb)
	in, err := Install(t.Context(), d, o)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(in.Dir, "third_party", "frontend"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("the left-out submodule is not an empty folder: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(in.Dir, "third_party", "frontend")); len(ents) != 0 {
		t.Fatalf("the left-out submodule has files: %v", ents)
	}
	want := "left out 1 git submodule(s), which are not part of the commit's own files: third_party/frontend"
	if len(in.Notes) != 1 || !strings.Contains(in.Notes[0], want) || !strings.Contains(in.Notes[0], "--submodules") {
		t.Fatalf("install record notes %q, want %q", in.Notes, want)
	}
	if !strings.Contains(logb.String(), want) || !strings.Contains(logb.String(), "level=WARN") {
		t.Fatalf("no warning naming the submodule:\n%s", logb.String())
	}
	es := ledger(t, d, "submodule-ignored")
	if len(es) != 1 || len(es[0].Notes) != 1 || !strings.Contains(es[0].Notes[0], want) {
		t.Fatalf("ledger %+v", es)
	}
}

// With --submodules a submodule is fetched at the commit the tree pins (not its
// repository's tip), over http through the install's egress proxy: its host's
// loopback address is refused by the address guard, and the error names the
// host, the address and the flag that admits it; admitted, the files are there
// and the record says from where, at which commit.
func TestSubmoduleFetchedAtThePinnedCommit(t *testing.T) {
	srvRoot := filepath.Join(t.TempDir(), "srv")
	os.MkdirAll(srvRoot, 0o755)
	port := gitHTTP(t, srvRoot)
	plugin, pinned, root := vendored(t, port, "")
	if err := os.Rename(filepath.Join(root, "frontend.git"), filepath.Join(srvRoot, "frontend.git")); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("frontend.test:%d", port)

	out, ok := inHosts(t, newData(t), "frontend.test", Options{Source: plugin, Submodules: true})
	if ok || !strings.Contains(out, host+" resolves to 127.0.0.1, an address the egress guard refuses") || !strings.Contains(out, "--egress-allow-cidr 127.0.0.1/32") {
		t.Fatalf("a submodule on a loopback address without the operator's range:\n%s", out)
	}

	d := newData(t)
	out, ok = inHosts(t, d, "frontend.test", Options{Source: plugin, Submodules: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if !ok {
		t.Fatalf("install with the submodule:\n%s", out)
	}
	in, err := installed.Lookup(d, "submodule-ignored")
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(in.Dir, "third_party", "frontend", "js", "app.js")); got != "console.log(1)\n" {
		t.Fatalf("submodule file %q", got)
	}
	if _, err := os.Stat(filepath.Join(in.Dir, "third_party", "frontend", "LATER")); err == nil {
		t.Fatal("the submodule's tip was installed, not the commit the tree pins")
	}
	want := installed.Submodule{Path: "third_party/frontend", URL: "http://" + host + "/frontend.git", Commit: pinned}
	if len(in.Submodules) != 1 || in.Submodules[0] != want || len(in.Notes) != 0 {
		t.Fatalf("record: submodules %+v notes %q, want %+v", in.Submodules, in.Notes, want)
	}
	if es := ledger(t, d, "submodule-ignored"); len(es) != 1 || len(es[0].Submodules) != 1 || es[0].Submodules[0] != want {
		t.Fatalf("ledger %+v", es)
	}

	// A host that redirects elsewhere: the redirect's host is not the URL's, and
	// the proxy refuses it even on an address the operator admitted.
	moved := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://frontend.test:%d%s", port, r.URL.RequestURI()), http.StatusFound)
	}), "")
	plugin2, _, root2 := vendored(t, port, fmt.Sprintf("http://moved.test:%d/frontend.git", moved))
	os.RemoveAll(root2)
	out, ok = inHosts(t, newData(t), "frontend.test moved.test", Options{Source: plugin2, Submodules: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if ok || !strings.Contains(out, host+" is not among the hosts this step may reach") {
		t.Fatalf("a submodule host redirecting to another host:\n%s", out)
	}
}

// A submodule's files follow the plugin's rules: a link in it that leads out of
// the plugin is refused, naming it.
func TestSubmoduleLinkOutOfThePluginRefused(t *testing.T) {
	srvRoot := filepath.Join(t.TempDir(), "srv")
	os.MkdirAll(srvRoot, 0o755)
	port := gitHTTP(t, srvRoot)
	work, _ := newRepo(t, "", map[string]string{"index.html": "x\n"})
	if err := os.Symlink("../../../../etc", filepath.Join(work, "up")); err != nil {
		t.Fatal(err)
	}
	pinned := commitFiles(t, work, nil)
	run(t, srvRoot, "git", "clone", "-q", "--bare", work, filepath.Join(srvRoot, "frontend.git"))
	plugin, _ := newRepo(t, "submodule-ignored", map[string]string{
		".gitmodules": fmt.Sprintf("[submodule \"f\"]\n\tpath = third_party/frontend\n\turl = http://frontend.test:%d/frontend.git\n", port),
	})
	run(t, plugin, "git", "update-index", "--add", "--cacheinfo", "160000,"+pinned+",third_party/frontend")
	run(t, plugin, "git", "commit", "-q", "-m", "vendor")
	d := newData(t)
	out, ok := inHosts(t, d, "frontend.test", Options{Source: plugin, Submodules: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if ok || !strings.Contains(out, "third_party/frontend/up: symlink to ../../../../etc points outside the plugin") {
		t.Fatalf("a link out of the plugin in a submodule:\n%s", out)
	}
	if _, err := installed.Lookup(d, "submodule-ignored"); err == nil {
		t.Fatal("installed")
	}
}

// With --submodules, a URL the node does not fetch is an error naming the
// submodule and why: a local path or file: (git itself refuses those for
// submodules), ssh, git://, and a relative URL of a repository with no http(s)
// URL to resolve it against.
func TestSubmoduleURLsRefused(t *testing.T) {
	for url, want := range map[string]string{
		"/srv/git/frontend.git":               "is not http(s)",
		"file:///srv/git/frontend.git":        "is not http(s)",
		"git@example.com:o/frontend.git":      "is not http(s)",
		"ssh://example.com/o/frontend.git":    "is not http(s)",
		"git://example.com/o/frontend.git":    "is not http(s)",
		"../frontend.git":                     "is relative, and the repository has no http(s) URL",
		"https://user:pw@example.com/f.git":   "carries credentials",
		"http://169.254.169.254/frontend.git": "169.254.169.254",
		"http://[::ffff:127.0.0.1]/f.git":     "127.0.0.1",
		"http://2130706433/frontend.git":      "2130706433",
		"https://example.com:99999/f.git":     "port",
		"https://frontend.invalid/o/f.git":    "frontend.invalid",
	} {
		plugin, _, _ := vendored(t, 1, url)
		_, err := Install(t.Context(), newData(t), Options{Source: plugin, Submodules: true, Log: quiet()})
		if err == nil || !strings.Contains(err.Error(), "submodule third_party/frontend: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("url %s: %v, want an error containing %q", url, err, want)
		}
	}
}

func TestSubmoduleURLResolvesLikeGit(t *testing.T) {
	for _, c := range []struct{ raw, base, want string }{
		{"../frontend.git", "https://example.com/o/plugin.git", "https://example.com/o/frontend.git"},
		{"./vendor/x.git", "https://example.com/o/plugin.git", "https://example.com/o/plugin.git/vendor/x.git"},
		{"../../other/x", "https://example.com/o/plugin", "https://example.com/other/x"},
		{"../../../../x", "https://example.com/o/plugin", "https://example.com/x"},
		{"https://elsewhere.example/x.git", "", "https://elsewhere.example/x.git"},
	} {
		u, err := submoduleURL(c.raw, c.base)
		if err != nil || u.String() != c.want {
			t.Errorf("submoduleURL(%q, %q) = %v, %v; want %s", c.raw, c.base, u, err, c.want)
		}
	}
}
