package installed

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/datadir"
)

const commitA, commitB = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

// placed puts an empty commit folder of name in place and activates it.
func placed(t *testing.T, d datadir.Dir, name, commit string) {
	t.Helper()
	if err := os.MkdirAll(d.PluginCommit(name, commit), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Activate(d, Meta{Name: name, Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// What is installed is what `current` names, read back from the commit's own
// record; Activate switches it, and List returns every plugin sorted by name.
func TestActivateThenRead(t *testing.T) {
	d := newData(t)
	if err := Activate(d, Meta{Name: "demo", Commit: commitA}); err == nil {
		t.Fatal("Activate without the commit's files in place succeeded")
	}
	placed(t, d, "zeta", commitA)
	placed(t, d, "demo", commitA)
	placed(t, d, "demo", commitB)
	if c, err := Current(d, "demo"); err != nil || c != commitB {
		t.Fatalf("Current = %q %v, want %s", c, err, commitB)
	}
	in, err := Lookup(d, "demo")
	if err != nil || in.Commit != commitB || in.Dir != d.PluginCommit("demo", commitB) {
		t.Fatalf("Lookup = %+v %v", in, err)
	}
	all, errs := List(d)
	if len(errs) != 0 || len(all) != 2 || all[0].Name != "demo" || all[1].Name != "zeta" {
		t.Fatalf("List = %v %v", all, errs)
	}
	if _, err := Lookup(d, "absent"); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Lookup of a plugin not installed: %v", err)
	}
}

// `current` must name a commit folder beside it: a link an attacker (or a bad
// edit) pointed elsewhere — another plugin's folder, an absolute path, a path
// with a slash — is refused, never followed; a record that names another plugin
// or commit is refused too, and List reports such a plugin instead of dropping it.
func TestCurrentAndRecordsAreNotFollowedElsewhere(t *testing.T) {
	d := newData(t)
	placed(t, d, "demo", commitA)
	placed(t, d, "other", commitB)
	for _, target := range []string{"../other/" + commitB, "/etc", filepath.Join(d.Plugin("other"), commitB), "..", "not-a-commit"} {
		os.Remove(d.Current("demo"))
		if err := os.Symlink(target, d.Current("demo")); err != nil {
			t.Fatal(err)
		}
		if c, err := Current(d, "demo"); err == nil || !strings.Contains(err.Error(), "not a commit folder") {
			t.Errorf("current -> %s: Current = %q %v, want a refusal", target, c, err)
		}
		all, errs := List(d)
		if len(errs) != 1 || len(all) != 1 || all[0].Name != "other" {
			t.Errorf("current -> %s: List = %v %v, want other listed and demo reported", target, all, errs)
		}
	}

	// A record copied from another plugin: it names other@commitB, not demo.
	os.Remove(d.Current("demo"))
	os.Symlink(commitB, d.Current("demo"))
	os.MkdirAll(d.PluginCommit("demo", commitB), 0o700)
	b, _ := os.ReadFile(filepath.Join(d.Plugin("other"), commitB+".json"))
	os.WriteFile(filepath.Join(d.Plugin("demo"), commitB+".json"), b, 0o600)
	if in, err := Lookup(d, "demo"); err == nil || !strings.Contains(err.Error(), ": names other@") {
		t.Errorf("a record naming another plugin: %+v %v", in, err)
	}
	if _, err := LookupCommit(d, "../demo", commitA); err == nil {
		t.Error("LookupCommit took a name with a path in it")
	}
}
