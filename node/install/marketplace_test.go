package install

import (
	"context"
	"fmt"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Claude Code marketplace resolves NAME@MARKETPLACE to a folder of the
// marketplace repository, a git URL at a pinned sha, or a folder of another
// repository (git-subdir), and installs it like any other source.
func TestInstallFromMarketplace(t *testing.T) {
	d := newData(t)
	mk, _ := newRepo(t, "", map[string]string{
		"README":            "a marketplace",
		".git/info/exclude": "repos/\n",
	})
	// A local marketplace names repositories inside its own folder.
	hooks := moveInto(t, newRepoDir(t, "claude-hooks", nil), filepath.Join(mk, "repos", "hooks"))
	old := run(t, hooks, "git", "rev-parse", "HEAD")
	commitFiles(t, hooks, map[string]string{"LATER": "not in the pinned commit"})
	mono := moveInto(t, newRepoDir(t, "", map[string]string{
		"pkgs/sub/plugin.json": pluginJSON("sub-plugin"),
		"README":               "a monorepo",
	}), filepath.Join(mk, "repos", "mono"))
	if _, err := extractFixture("demo", filepath.Join(mk, "plugins", "demo")); err != nil {
		t.Fatal(err)
	}
	mkCommit := commitFiles(t, mk, map[string]string{
		".claude-plugin/marketplace.json": fmt.Sprintf(`{
  "name": "test-market",
  "owner": {"name": "oz0 tests"},
  "plugins": [
    {"name": "demo", "source": "./plugins/demo", "description": "relative"},
    {"name": "claude-hooks", "source": {"source": "url", "url": "./repos/hooks", "ref": "main", "sha": %q}},
    {"name": "sub-plugin", "source": {"source": "git-subdir", "url": %q, "path": "pkgs/sub"}},
    {"name": "from-npm", "source": {"source": "npm", "package": "x"}},
    {"name": "escape", "source": "../outside"}
  ]
}
`, old, mono),
	})

	in := mustInstall(t, d, Options{Source: "demo@" + mk, By: "mk"})
	if in.Name != "demo" || in.Source != mk || in.Subdir != "plugins/demo" || in.Commit != mkCommit {
		t.Fatalf("relative entry: %+v", in.Meta)
	}
	es := ledger(t, d, "demo")
	if len(es) != 1 || es[0].Marketplace != "demo@"+mk {
		t.Fatalf("ledger does not name the marketplace: %+v", es)
	}

	in = mustInstall(t, d, Options{Source: "claude-hooks@" + mk})
	if in.Commit != old || in.Source != hooks || in.Ref != "main" {
		t.Fatalf("url entry pinned to %s: %+v", old, in.Meta)
	}
	if _, err := os.Stat(filepath.Join(in.Dir, "LATER")); err == nil {
		t.Fatal("url entry: files after the pinned sha were installed")
	}

	in = mustInstall(t, d, Options{Source: "sub-plugin@" + mk})
	if in.Subdir != "pkgs/sub" || in.Source != mono {
		t.Fatalf("git-subdir entry: %+v", in.Meta)
	}
	if _, err := os.Stat(filepath.Join(in.Dir, "README")); err == nil {
		t.Fatal("git-subdir entry: files outside its path were installed")
	}

	installErr(t, d, Options{Source: "from-npm@" + mk}, `source type "npm" is not supported`)
	installErr(t, d, Options{Source: "escape@" + mk}, "must be a folder inside the marketplace")
	installErr(t, d, Options{Source: "nothing@" + mk}, "no plugin named nothing (it lists: demo, claude-hooks, sub-plugin, from-npm, escape)")
	installErr(t, d, Options{Source: "demo@" + mk, Subdir: "x"}, "--subdir cannot be used with a marketplace")
}

func TestSplitMarketplace(t *testing.T) {
	dir := t.TempDir()
	for s, want := range map[string]bool{
		"demo@" + dir:                     true,
		"demo@https://example.com/mk.git": true,
		"demo@owner/repo":                 true,
		"git@github.com:owner/repo.git":   false,
		"Demo@owner/repo":                 false,
		dir:                               false,
		"https://example.com/x.git":       false,
	} {
		if _, _, got := splitMarketplace(s); got != want {
			t.Errorf("splitMarketplace(%q) = %v, want %v", s, got, want)
		}
	}
}

// newRepoDir is newRepo without the commit.
func newRepoDir(t *testing.T, fixture string, files map[string]string) string {
	t.Helper()
	dir, _ := newRepo(t, fixture, files)
	return dir
}

// moveInto moves folder src to dst (creating dst's parents) and returns dst.
func moveInto(t *testing.T, src, dst string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// gitHTTPServer serves the repositories under root over git's smart HTTP protocol
// on loopback (git http-backend behind net/http/cgi) and returns its base URL.
func gitHTTPServer(t *testing.T, root string) string {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git: marketplaces are not tested here")
	}
	h := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A marketplace fetched from a URL is the plugin author's word: its entries may
// name only network repositories. A local path, file:, ssh (which would present
// the operator's ssh agent to the author's host) or a transport helper such as
// ext:: (which runs a command) is refused with an error naming the entry and the
// marketplace, before git runs.
func TestRemoteMarketplaceNamesOnlyRemoteSources(t *testing.T) {
	d := newData(t)
	served := t.TempDir()
	moveInto(t, newRepoDir(t, "claude-hooks", nil), filepath.Join(served, "plugin.git"))
	// A repository of the operator's on this machine, which no remote entry may read.
	private := newRepoDir(t, "", map[string]string{"plugin.json": pluginJSON("private"), "SECRET": "operator's"})
	pwned := filepath.Join(t.TempDir(), "pwned")
	mk := moveInto(t, newRepoDir(t, "", map[string]string{"README": "a marketplace"}), filepath.Join(served, "mk.git"))
	if _, err := extractFixture("demo", filepath.Join(mk, "plugins", "demo")); err != nil {
		t.Fatal(err)
	}
	base := gitHTTPServer(t, served)
	entries := []struct{ name, source string }{
		{"good", fmt.Sprintf(`{"source": "url", "url": %q}`, base+"/plugin.git")},
		{"demo", `"./plugins/demo"`},
		{"local-path", fmt.Sprintf(`{"source": "url", "url": %q}`, private)},
		{"relative-path", `{"source": "url", "url": "../../private"}`},
		{"file-url", fmt.Sprintf(`{"source": "url", "url": %q}`, "file://"+private)},
		{"ssh-url", `{"source": "url", "url": "ssh://git@127.0.0.1:9/x.git"}`},
		{"scp-like", `{"source": "url", "url": "git@127.0.0.1:x.git"}`},
		{"ext-helper", fmt.Sprintf(`{"source": "url", "url": %q}`, "ext::sh -c touch% "+pwned)},
		{"fd-helper", `{"source": "url", "url": "fd::0"}`},
		{"subdir-ssh", `{"source": "git-subdir", "url": "ssh://git@127.0.0.1:9/x.git", "path": "p"}`},
		{"subdir-file", fmt.Sprintf(`{"source": "git-subdir", "url": %q, "path": "."}`, "file://"+private)},
	}
	var list []string
	for _, e := range entries {
		list = append(list, fmt.Sprintf(`{"name": %q, "source": %s}`, e.name, e.source))
	}
	commitFiles(t, mk, map[string]string{
		".claude-plugin/marketplace.json": `{"name": "remote-market", "plugins": [` + strings.Join(list, ",\n") + `]}`,
	})
	run(t, mk, "git", "update-server-info")
	mkURL := base + "/mk.git"

	in := mustInstall(t, d, Options{Source: "good@" + mkURL})
	if in.Source != base+"/plugin.git" {
		t.Errorf("network entry installed from %q", in.Source)
	}
	in = mustInstall(t, d, Options{Source: "demo@" + mkURL})
	if in.Source != mkURL || in.Subdir != "plugins/demo" {
		t.Errorf("folder entry of a remote marketplace: %+v", in.Meta)
	}
	for _, e := range entries[2:] {
		installErr(t, d, Options{Source: e.name + "@" + mkURL}, "marketplace "+mkURL+": plugin "+e.name+": source ")
		_, err := Install(context.Background(), d, Options{Source: e.name + "@" + mkURL, Log: quiet()})
		if !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "only https://, http:// or git://") {
			t.Errorf("entry %s: not refused as a non-network source: %v", e.name, err)
		}
		if _, err := os.Stat(d.Plugin(e.name)); err == nil {
			t.Errorf("entry %s: something was installed", e.name)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Errorf("the ext:: entry ran its command")
	}
}

// A local marketplace may name repositories and folders inside itself, never one
// outside it, whether through ".." or through a symlink.
func TestLocalMarketplaceStaysInsideItself(t *testing.T) {
	d := newData(t)
	outside := newRepoDir(t, "claude-hooks", nil)
	mk := newRepoDir(t, "", map[string]string{".git/info/exclude": "repos/\n"})
	inside := moveInto(t, newRepoDir(t, "claude-hooks", nil), filepath.Join(mk, "repos", "inside"))
	if err := os.Symlink(outside, filepath.Join(mk, "repos", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := extractFixture("demo", filepath.Join(mk, "plugins", "demo")); err != nil {
		t.Fatal(err)
	}
	// A committed symlink in the marketplace: a folder entry through it may lead anywhere.
	if err := os.Symlink("plugins", filepath.Join(mk, "via")); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(mk, outside)
	if err != nil {
		t.Fatal(err)
	}
	commitFiles(t, mk, map[string]string{
		".claude-plugin/marketplace.json": fmt.Sprintf(`{"name": "local-market", "plugins": [
    {"name": "claude-hooks", "source": {"source": "url", "url": "./repos/inside"}},
    {"name": "dotdot", "source": {"source": "url", "url": %q}},
    {"name": "absolute", "source": {"source": "url", "url": %q}},
    {"name": "file-url", "source": {"source": "url", "url": %q}},
    {"name": "linked", "source": {"source": "url", "url": "./repos/link"}},
    {"name": "via-link", "source": "./via/demo"},
    {"name": "demo", "source": "./plugins/demo"}
  ]}`, rel, outside, "file://"+outside),
	})
	in := mustInstall(t, d, Options{Source: "claude-hooks@" + mk})
	if in.Source != inside {
		t.Errorf("inside entry installed from %q, want %q", in.Source, inside)
	}
	mustInstall(t, d, Options{Source: "demo@" + mk})
	for _, name := range []string{"dotdot", "absolute", "file-url", "linked"} {
		installErr(t, d, Options{Source: name + "@" + mk}, "marketplace "+mk+": plugin "+name+": source ")
		installErr(t, d, Options{Source: name + "@" + mk}, "outside the marketplace folder")
	}
	installErr(t, d, Options{Source: "via-link@" + mk}, "marketplace "+mk+": plugin via-link: source ./via/demo: via is a symbolic link")
}
