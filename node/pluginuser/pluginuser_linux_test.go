package pluginuser

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// traversableData makes a data folder whose ancestors every user can traverse
// (t.TempDir's own folders are 0700).
func traversableData(t *testing.T) datadir.Dir {
	t.Helper()
	base := t.TempDir()
	for p := base; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	d, _ := datadir.New(filepath.Join(base, "data"))
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	if ok, blocker := datadir.TraversableByOthers(d.Root); !ok {
		t.Skipf("the temporary folder cannot be made traversable (%s): per-plugin permissions not tested", blocker)
	}
	return d
}

// place puts fixture plugin name on the node as an install leaves it: its files
// under plugins/<name>/<commit>, its record written and made the active one.
func place(t *testing.T, d datadir.Dir, name string) *installed.Plugin {
	t.Helper()
	const commit = "0123456789abcdef0123456789abcdef01234567"
	if _, err := fixtures.Extract(name, d.PluginCommit(name, commit)); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "fixtures/" + name}); err != nil {
		t.Fatal(err)
	}
	in, err := installed.Lookup(d, name)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// as runs argv as uid/gid with no supplementary groups and reports whether it
// succeeded.
func as(t *testing.T, uid uint32, argv ...string) bool {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	c.Env = []string{"PATH=/usr/bin:/bin"}
	c.Dir = "/"
	return c.Run() == nil
}

func wantMode(t *testing.T, p string, mode os.FileMode, uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != mode || st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: mode %04o %d:%d, want %04o %d:%d", p, fi.Mode().Perm(), st.Uid, st.Gid, mode, uid, gid)
	}
}

// On a root node each plugin's user reads its own files and home and the things it
// needs (runtimes, tenant list), and nothing of another plugin or of the node.
func TestPreparePerPluginUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: per-plugin user permissions not tested")
	}
	d := traversableData(t)
	a := place(t, d, "demo")
	b := place(t, d, "claude-hooks")
	uidA, uidB := policy.PluginUID("demo"), policy.PluginUID("claude-hooks")
	os.WriteFile(d.TenantList(), []byte("example.com\n"), 0o600)
	os.WriteFile(d.Token(), []byte("secret"), 0o644) // widened by hand: must be narrowed
	os.WriteFile(d.MetricsToken(), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(d.Logs(), "demo.log"), []byte("log"), 0o600)
	os.Chmod(d.Root, 0o755) // a listable data folder: must become 0711

	bin := filepath.Join(filepath.Dir(d.Root), "oz0-node")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	for _, p := range []struct {
		name string
		uid  uint32
	}{{"demo", uidA}, {"claude-hooks", uidB}} {
		if err := Prepare(d, p.name, p.uid, p.uid, bin); err != nil {
			t.Fatalf("Prepare %s: %v", p.name, err)
		}
	}

	wantMode(t, d.Root, 0o711, 0, 0)
	wantMode(t, d.Plugins(), 0o711, 0, 0)
	wantMode(t, d.Homes(), 0o711, 0, 0)
	wantMode(t, d.Plugin("demo"), 0o750, 0, uidA)
	wantMode(t, a.Dir, 0o750, 0, uidA)
	wantMode(t, filepath.Join(a.Dir, "plugin.json"), 0o640, 0, uidA)
	wantMode(t, filepath.Join(a.Dir, "server.py"), 0o750, 0, uidA)
	wantMode(t, filepath.Join(d.Plugin("demo"), a.Commit+".json"), 0o600, 0, 0)
	wantMode(t, d.Home("demo"), 0o700, uidA, uidA)
	wantMode(t, d.Key(), 0o600, 0, 0)
	wantMode(t, d.Token(), 0o600, 0, 0)
	wantMode(t, d.MetricsToken(), 0o600, 0, 0)
	wantMode(t, d.TenantList(), 0o644, 0, 0)
	wantMode(t, d.Logs(), 0o700, 0, 0)

	aFile := filepath.Join(a.Dir, "plugin.json")
	bFile := filepath.Join(b.Dir, ".claude-plugin", "plugin.json")
	rs, err := installed.Runtimes(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		uid  uint32
		argv []string
		ok   bool
	}{
		{"own plugin file", uidA, []string{"cat", aFile}, true},
		{"own plugin folder listing", uidA, []string{"ls", a.Dir}, true},
		{"write own home", uidA, []string{"touch", filepath.Join(d.Home("demo"), "x")}, true},
		{"tenant egress list", uidA, []string{"cat", d.TenantList()}, true},
		{"node binary", uidA, []string{"test", "-r", bin}, true},
		{"other plugin's file", uidA, []string{"cat", bFile}, false},
		{"other plugin's folder", uidA, []string{"ls", b.Dir}, false},
		{"other plugin's home", uidA, []string{"ls", d.Home("claude-hooks")}, false},
		{"other plugin reads mine", uidB, []string{"cat", aFile}, false},
		{"its own after all", uidB, []string{"cat", bFile}, true},
		{"write own plugin files", uidA, []string{"sh", "-c", "echo x >> " + aFile}, false},
		{"create in own plugin folder", uidA, []string{"touch", filepath.Join(a.Dir, "new")}, false},
		{"node key", uidA, []string{"cat", d.Key()}, false},
		{"tenant token", uidA, []string{"cat", d.Token()}, false},
		{"metrics token", uidA, []string{"cat", d.MetricsToken()}, false},
		{"logs", uidA, []string{"cat", filepath.Join(d.Logs(), "demo.log")}, false},
		{"ledger", uidA, []string{"cat", d.Ledger()}, false},
		{"install record", uidA, []string{"cat", filepath.Join(d.Plugin("demo"), a.Commit+".json")}, false},
		{"data folder listing", uidA, []string{"ls", d.Root}, false},
		{"plugins listing", uidA, []string{"ls", d.Plugins()}, false},
	} {
		if got := as(t, c.uid, c.argv...); got != c.ok {
			t.Errorf("%s as uid %d (%s): succeeded=%v, want %v", c.what, c.uid, strings.Join(c.argv, " "), got, c.ok)
		}
	}
	for _, r := range rs {
		if !as(t, uidA, "test", "-r", r) {
			t.Errorf("runtime %s not readable by the plugin user", r)
		}
	}
	if py, _ := installed.LoadRuntimes(d); py.Python != nil && !as(t, uidA, py.Python.Path, "-I", "-c", "import json") {
		t.Errorf("the plugin user cannot run the managed Python %s", py.Python.Path)
	}
}

// A data folder under a folder others cannot traverse (like /root) turns plugin
// users off with a finding saying why and what to do, and nothing above the data
// folder is changed; a runtime or binary out of reach is reported, not fixed.
func TestPluginUsersOffUnderPrivateFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: per-plugin user permissions not tested")
	}
	base := t.TempDir()
	private := filepath.Join(base, "root-like")
	os.Mkdir(private, 0o700)
	d, _ := datadir.New(filepath.Join(private, "data"))
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	ok, f := Available(d)
	if ok || f == nil || f.Code != api.CodeNoPluginUsers || !strings.Contains(f.Message, private) || !strings.Contains(f.Fix, "/var/lib/oz0-node") {
		t.Fatalf("Available = %v, %+v", ok, f)
	}
	err := Prepare(d, "demo", policy.PluginUID("demo"), policy.PluginUID("demo"))
	if !errors.Is(err, ErrOff) {
		t.Fatalf("Prepare: %v", err)
	}
	if fi, _ := os.Stat(private); fi.Mode().Perm() != 0o700 {
		t.Fatalf("a folder above the data folder was changed to %04o", fi.Mode().Perm())
	}

	d2 := traversableData(t)
	place(t, d2, "demo")
	hidden := filepath.Join(private, "oz0-node")
	os.WriteFile(hidden, []byte("x"), 0o755)
	err = Prepare(d2, "demo", policy.PluginUID("demo"), policy.PluginUID("demo"), hidden)
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.Path != hidden {
		t.Fatalf("Prepare with an unreachable binary: %v", err)
	}
	if fi, _ := os.Stat(private); fi.Mode().Perm() != 0o700 {
		t.Fatal("Prepare changed a folder outside the data folder")
	}
	if ok, f := Available(d2); !ok || f != nil {
		t.Fatalf("a traversable data folder: %v %+v", ok, f)
	}
}
