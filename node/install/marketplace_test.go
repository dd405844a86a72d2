package install

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A Claude Code marketplace resolves NAME@MARKETPLACE to a folder of the
// marketplace repository, a git URL at a pinned sha, or a folder of another
// repository (git-subdir), and installs it like any other source.
func TestInstallFromMarketplace(t *testing.T) {
	d := newData(t)
	hooks, old := newRepo(t, "claude-hooks", nil)
	commitFiles(t, hooks, map[string]string{"LATER": "not in the pinned commit"})
	mono, _ := newRepo(t, "", map[string]string{
		"pkgs/sub/plugin.json": pluginJSON("sub-plugin"),
		"README":               "a monorepo",
	})

	mk, _ := newRepo(t, "", map[string]string{
		"README": "a marketplace",
	})
	if _, err := extractFixture("demo", filepath.Join(mk, "plugins", "demo")); err != nil {
		t.Fatal(err)
	}
	mkCommit := commitFiles(t, mk, map[string]string{
		".claude-plugin/marketplace.json": fmt.Sprintf(`{
  "name": "test-market",
  "owner": {"name": "oz0 tests"},
  "plugins": [
    {"name": "demo", "source": "./plugins/demo", "description": "relative"},
    {"name": "claude-hooks", "source": {"source": "url", "url": %q, "ref": "main", "sha": %q}},
    {"name": "sub-plugin", "source": {"source": "git-subdir", "url": %q, "path": "pkgs/sub"}},
    {"name": "from-npm", "source": {"source": "npm", "package": "x"}},
    {"name": "escape", "source": "../outside"}
  ]
}
`, hooks, old, mono),
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
