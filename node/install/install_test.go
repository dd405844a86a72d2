package install

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// A plugin installs from a local git repository at a given commit; the ledger says
// who installed which repository at which commit; installing it again changes
// nothing; another commit replaces it only at the switch and is an update.
func TestInstallFromLocalRepositoryAtCommit(t *testing.T) {
	d := newData(t)
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"NEW": "second commit\n"})

	in := mustInstall(t, d, Options{Source: repo, Commit: c1[:10], By: "alice"})
	if in.Name != "demo" || in.Commit != c1 || in.Source != repo || in.Private {
		t.Fatalf("installed %+v", in.Meta)
	}
	got, err := installed.Lookup(d, "demo")
	if err != nil || got.Commit != c1 {
		t.Fatalf("lookup: %v %+v", err, got)
	}
	if readFile(t, filepath.Join(got.Dir, "plugin.json")) != readFile(t, filepath.Join(repo, "plugin.json")) {
		t.Fatal("installed plugin.json differs from the repository's")
	}
	if fi, err := os.Stat(filepath.Join(got.Dir, "server.py")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("server.py lost its executable bit: %v %v", fi, err)
	}
	for _, p := range []string{".git", "NEW"} {
		if _, err := os.Lstat(filepath.Join(got.Dir, p)); err == nil {
			t.Fatalf("%s installed at commit %s", p, c1)
		}
	}
	es := ledger(t, d, "demo")
	if len(es) != 1 || es[0].Action != installed.ActionInstall || es[0].Who != "alice" || es[0].Commit != c1 ||
		es[0].Source != repo || es[0].Mode != "strict" || es[0].Build == nil || es[0].Build.PackageCode {
		t.Fatalf("ledger %+v", es)
	}

	again := mustInstall(t, d, Options{Source: repo, Commit: c1})
	if !again.Unchanged || again.Commit != c1 {
		t.Fatalf("reinstall of the same commit: %+v", again)
	}
	if n := len(ledger(t, d, "demo")); n != 1 {
		t.Fatalf("a no-op reinstall wrote the ledger (%d lines)", n)
	}

	up := mustInstall(t, d, Options{Source: repo, By: "bob"})
	if up.Commit != c2 || up.Unchanged {
		t.Fatalf("update: %+v", up)
	}
	if readFile(t, filepath.Join(up.Dir, "NEW")) != "second commit\n" {
		t.Fatal("update did not install the new commit's files")
	}
	es = ledger(t, d, "demo")
	if len(es) != 2 || es[1].Action != installed.ActionUpdate || es[1].Previous != c1 || es[1].Who != "bob" {
		t.Fatalf("ledger after update %+v", es)
	}
	// The previous commit stays on disk (one step back), the staging folder is empty.
	if _, err := os.Stat(d.PluginCommit("demo", c1)); err != nil {
		t.Fatalf("previous commit removed: %v", err)
	}
	stagingEmpty(t, d)
}

func TestCommitNotReachedByRefIsRefused(t *testing.T) {
	d := newData(t)
	repo, _ := newRepo(t, "demo", nil)
	run(t, repo, "git", "checkout", "-q", "-b", "side")
	side := commitFiles(t, repo, map[string]string{"SIDE": "x"})
	run(t, repo, "git", "checkout", "-q", "main")

	installErr(t, d, Options{Source: repo, Ref: "main", Commit: side}, "is not reached by main")
	installErr(t, d, Options{Source: repo, Ref: "main", Commit: "0123456789abcdef0123456789abcdef01234567"}, "is not reached by main")
	in := mustInstall(t, d, Options{Source: repo, Ref: "side", Commit: side})
	if in.Commit != side {
		t.Fatalf("installed %s, want %s", in.Commit, side)
	}
	installErr(t, d, Options{Source: repo, Ref: "--upload-pack=touch"}, "not a branch")
	installErr(t, d, Options{Source: "--upload-pack=touch /tmp/x"}, "not a git URL")
}

func TestInstallSubdirAndPlainFolder(t *testing.T) {
	d := newData(t)
	repo, c := newRepo(t, "", map[string]string{
		"README":                           "a repository with a plugin below",
		"plugins/sub/plugin.json":          pluginJSON("sub-plugin"),
		"plugins/sub/.claude-plugin/.keep": "",
		"plugins/sub/lib/data.txt":         "data",
		"plugins/other/plugin.json":        pluginJSON("other"),
	})
	in := mustInstall(t, d, Options{Source: repo, Subdir: "plugins/sub"})
	if in.Name != "sub-plugin" || in.Subdir != "plugins/sub" || in.Commit != c {
		t.Fatalf("installed %+v", in.Meta)
	}
	if _, err := os.Stat(filepath.Join(in.Dir, "README")); err == nil {
		t.Fatal("files outside --subdir were installed")
	}
	installErr(t, d, Options{Source: repo, Subdir: "../x"}, "must be a folder inside")
	installErr(t, d, Options{Source: repo, Subdir: "nope"}, "no such folder")

	// A plain folder installs as a private candidate; its "commit" is a content hash.
	dir := filepath.Join(t.TempDir(), "folder")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(pluginJSON("folder-plugin")), 0o644)
	os.Mkdir(filepath.Join(dir, ".git"), 0o755) // not a repository: no HEAD
	os.RemoveAll(filepath.Join(dir, ".git"))
	f := mustInstall(t, d, Options{Source: dir})
	if !f.Private || !installed.ValidCommit(f.Commit) {
		t.Fatalf("folder install: %+v", f.Meta)
	}
	if again := mustInstall(t, d, Options{Source: dir}); !again.Unchanged {
		t.Fatal("reinstalling an unchanged folder was not a no-op")
	}
	installErr(t, d, Options{Source: dir, Commit: "abcdef1"}, "plain folder")
	installErr(t, d, Options{Source: repo, Subdir: "plugins/sub", Name: "other-name"}, "manifest names it sub-plugin")
}

// Symlinks leaving the plugin, hard links, FIFOs, devices, sockets, submodules
// that say nowhere where they come from, and absurd sizes are refused with an error naming the path; nothing is installed.
func TestHostileTreesAreRefused(t *testing.T) {
	d := newData(t)

	link := func(target string) string {
		repo, _ := newRepo(t, "", map[string]string{"plugin.json": pluginJSON("links")})
		os.Symlink(target, filepath.Join(repo, "lib"))
		commitFiles(t, repo, nil)
		return repo
	}
	installErr(t, d, Options{Source: link("/etc")}, "lib: symlink to /etc points outside the plugin")
	installErr(t, d, Options{Source: link("../../..")}, "lib: symlink to ../../.. points outside the plugin")
	okRepo := link("plugin.json")
	if in := mustInstall(t, d, Options{Source: okRepo}); in.Name != "links" {
		t.Fatal("a symlink inside the plugin was refused")
	}

	sub, _ := newRepo(t, "", map[string]string{"plugin.json": pluginJSON("subm")})
	run(t, sub, "git", "update-index", "--add", "--cacheinfo", "160000,0123456789abcdef0123456789abcdef01234567,vendor/x")
	run(t, sub, "git", "commit", "-q", "-m", "submodule")
	installErr(t, d, Options{Source: sub, Submodules: true}, "vendor/x: a git submodule, and the repository has no .gitmodules")

	folder := func(name string, mk func(dir string)) string {
		dir := filepath.Join(t.TempDir(), name)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(pluginJSON(name)), 0o644)
		mk(dir)
		return dir
	}
	hard := folder("hard", func(dir string) {
		os.WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o644)
		os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b"))
	})
	installErr(t, d, Options{Source: hard}, "a: a hard link")
	fifo := folder("fifo", func(dir string) { syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644) })
	installErr(t, d, Options{Source: fifo}, "pipe: a FIFO")
	big := folder("big", func(dir string) {
		f, _ := os.Create(filepath.Join(dir, "huge.bin"))
		f.Truncate(MaxTotalBytes + 1) // sparse: costs no disk
		f.Close()
	})
	installErr(t, d, Options{Source: big}, "exceed")
	many := folder("many", func(dir string) {
		for i := 0; i <= MaxFiles; i++ {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644)
		}
	})
	installErr(t, d, Options{Source: many}, fmt.Sprintf("more than %d files", MaxFiles))
	sock := folder("sock", func(dir string) {
		if l, err := net.Listen("unix", filepath.Join(dir, "s.sock")); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	})
	installErr(t, d, Options{Source: sock}, "s.sock: a socket")
	outside := folder("outside", func(dir string) { os.Symlink("/etc/passwd", filepath.Join(dir, "pw")) })
	installErr(t, d, Options{Source: outside}, "pw: symlink to /etc/passwd points outside the plugin")
	if os.Geteuid() == 0 {
		dev := folder("dev", func(dir string) { syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 0x103) })
		installErr(t, d, Options{Source: dev}, "null: a character device")
	} else {
		t.Log("not root: device files not tested")
	}
	for _, n := range []string{"hard", "fifo", "big", "many", "sock", "outside", "dev", "subm"} {
		if _, err := installed.Lookup(d, n); !errors.Is(err, installed.ErrNotInstalled) {
			t.Errorf("plugin %s: %v, want not installed", n, err)
		}
	}
	stagingEmpty(t, d)
}

// Nothing from the fetched repository runs: its config, hooks and attributes name
// programs, and none of them leaves its marker.
func TestFetchRunsNothingFromTheRepository(t *testing.T) {
	d := newData(t)
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "evil.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$0 $*\" >> "+marker+"\ncat\n"), 0o755)
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":    pluginJSON("quiet"),
		".gitattributes": "* filter=evil diff=evil\n",
	})
	for _, kv := range [][2]string{
		{"core.fsmonitor", script}, {"filter.evil.smudge", script}, {"filter.evil.process", script},
		{"uploadpack.packObjectsHook", script}, {"core.sshCommand", script},
	} {
		run(t, repo, "git", "config", kv[0], kv[1])
	}
	for _, h := range []string{"post-checkout", "pre-upload-pack", "post-merge", "reference-transaction"} {
		os.WriteFile(filepath.Join(repo, ".git", "hooks", h), []byte("#!/bin/sh\necho hook >> "+marker+"\n"), 0o755)
	}
	os.Remove(marker)
	in := mustInstall(t, d, Options{Source: repo})
	if in.Name != "quiet" {
		t.Fatal(in)
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("something from the repository ran during install: %s", b)
	}
}

// Two plugins whose names hash to the same per-plugin uid: the second is refused
// with an error naming both.
func TestUIDCollisionRefused(t *testing.T) {
	a, b := collidingNames(t)
	d := newData(t)
	ra, _ := newRepo(t, "", map[string]string{"plugin.json": pluginJSON(a)})
	rb, _ := newRepo(t, "", map[string]string{"plugin.json": pluginJSON(b)})
	mustInstall(t, d, Options{Source: ra})
	installErr(t, d, Options{Source: rb}, "plugin "+b+" hashes to uid")
	_, err := Install(context.Background(), d, Options{Source: rb, Log: quiet()})
	if !strings.Contains(err.Error(), a) {
		t.Fatalf("collision error does not name %s: %v", a, err)
	}
}

func collidingNames(t *testing.T) (string, string) {
	t.Helper()
	seen := map[uint32]string{}
	for i := 0; ; i++ {
		n := "p" + strings.ToLower(strings.ReplaceAll(
			string(rune('a'+i%26))+string(rune('a'+(i/26)%26))+string(rune('a'+(i/676)%26))+string(rune('a'+(i/17576)%26))+string(rune('a'+(i/456976)%26)), "", ""))
		uid := policy.PluginUID(n)
		if o, ok := seen[uid]; ok {
			return o, n
		}
		seen[uid] = n
		if i > 5_000_000 {
			t.Skip("no colliding names found")
		}
	}
}

func TestRemove(t *testing.T) {
	d := newData(t)
	repo, c := newRepo(t, "demo", nil)
	mustInstall(t, d, Options{Source: repo})
	os.MkdirAll(filepath.Join(d.Home("demo"), "notes"), 0o700)
	old, err := Remove(context.Background(), d, RemoveOptions{Name: "demo", By: "carol", Log: quiet()})
	if err != nil || old == nil || old.Commit != c {
		t.Fatalf("remove: %v %+v", err, old)
	}
	for _, p := range []string{d.Plugin("demo"), d.Home("demo")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there after remove: %v", p, err)
		}
	}
	es := ledger(t, d, "demo")
	if len(es) != 2 || es[1].Action != installed.ActionRemove || es[1].Who != "carol" || es[1].Previous != c || es[1].Source != repo {
		t.Fatalf("ledger %+v", es)
	}
	if _, err := Remove(context.Background(), d, RemoveOptions{Name: "demo", Log: quiet()}); !errors.Is(err, installed.ErrNotInstalled) {
		t.Fatalf("second remove: %v", err)
	}
	stagingEmpty(t, d)
}

// Every fixture plugin installs from a local git repository at a given commit under
// strict; the one whose build backend would have to run declares nothing that
// runs, so it is not built.
func TestInstallEveryFixtureAtCommit(t *testing.T) {
	d := newData(t)
	rs, err := installed.LoadRuntimes(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range fixtures.Valid() {
		if name == "npm-postinstall-marker" && (rs.Node == nil || rs.NPM == "") {
			t.Logf("%s: no managed npm, not installed", name)
			continue
		}
		repo, c := newRepo(t, name, nil)
		commitFiles(t, repo, map[string]string{"LATER": "after the pinned commit"})
		got, err := Install(context.Background(), d, Options{Source: repo, Commit: c, By: "fixtures", Log: quiet()})
		if name == "py-build-marker" {
			// Nothing of it runs here, so its build backend is not even asked for
			// (with a server that could use it, strict refuses it: build_test.go).
			if err != nil || len(got.Notes) != 1 || !strings.Contains(got.Notes[0], "pyproject.toml not built") {
				t.Errorf("%s: %v %+v, want installed with its build skipped", name, err, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		in, err := installed.Lookup(d, name)
		if err != nil || in.Commit != c {
			t.Errorf("%s: %+v %v", name, in, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(in.Dir, "LATER")); err == nil {
			t.Errorf("%s: files after the pinned commit installed", name)
		}
	}
	for _, e := range ledger(t, d, "") {
		if e.Who != "fixtures" || e.Action != installed.ActionInstall || e.Commit == "" || e.Source == "" {
			t.Errorf("ledger entry %+v", e)
		}
	}
}
