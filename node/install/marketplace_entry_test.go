package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/manifest"
)

// An entry with strict: false carries the plugin's manifest itself: the plugin's
// folder has none, and the node installs it with the entry as its manifest,
// validated like any other. A folder that has its own as well is refused.
func TestMarketplaceEntryCarriesThePluginsManifest(t *testing.T) {
	d := newData(t)
	mk, _ := newRepo(t, "", map[string]string{
		"plugins/bare/server.py":            "print('a server')\n",
		"plugins/bare/skills/x/SKILL.md":    "---\nname: x\n---\nA skill.\n",
		"plugins/both/plugin.json":          pluginJSON("both"),
		"plugins/loose/hooks/check.sh":      "#!/bin/sh\nexit 0\n",
		"plugins/invalid/README":            "a folder",
		"plugins/escape/README":             "a folder",
		".claude-plugin/marketplace.json.x": "",
	})
	outside := t.TempDir()
	// A link committed where the manifest would be written, pointing out of the tree.
	if err := os.Symlink(outside, filepath.Join(mk, "plugins", "escape", ".claude-plugin")); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, mk, map[string]string{".claude-plugin/marketplace.json": `{
  "name": "entries",
  "plugins": [
    {"name": "bare", "source": "./plugins/bare", "strict": false, "version": "2.0.0",
     "description": "its manifest is this entry", "category": "tools",
     "skills": "./skills/",
     "mcpServers": {"main": {"command": "python3", "args": ["${CLAUDE_PLUGIN_ROOT}/server.py"]}}},
    {"name": "both", "source": "./plugins/both", "strict": false,
     "mcpServers": {"main": {"command": "python3"}}},
    {"name": "loose", "source": "./plugins/loose",
     "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/hooks/check.sh"}]}]}},
    {"name": "invalid", "source": "./plugins/invalid", "strict": false,
     "mcpServers": {"main": {"command": "python3", "cwd": "../../etc"}}},
    {"name": "escape", "source": "./plugins/escape", "strict": false,
     "mcpServers": {"main": {"command": "python3"}}}
  ]}`})

	in := mustInstall(t, d, Options{Source: "bare@" + mk})
	m, err := manifest.Load(in.Dir, manifest.Options{})
	if err != nil {
		t.Fatalf("installed entry manifest: %v", err)
	}
	if m.Name != "bare" || m.Version != "2.0.0" || m.Server("main") == nil || m.NotRunSummary() != "skills" {
		t.Errorf("manifest from the entry: %+v", m)
	}
	b, _ := os.ReadFile(filepath.Join(in.Dir, ".claude-plugin", "plugin.json"))
	if strings.Contains(string(b), `"source"`) || strings.Contains(string(b), `"category"`) || strings.Contains(string(b), `"strict"`) {
		t.Errorf("the written manifest keeps marketplace-only keys:\n%s", b)
	}

	// A default (strict) entry is the manifest too where the folder has none.
	in = mustInstall(t, d, Options{Source: "loose@" + mk})
	if m, err := manifest.Load(in.Dir, manifest.Options{}); err != nil || len(m.Hooks) != 1 {
		t.Errorf("loose entry: %v %+v", err, m)
	}

	installErr(t, d, Options{Source: "both@" + mk}, "strict: false")
	// The entry's manifest is validated like a folder's.
	installErr(t, d, Options{Source: "invalid@" + mk}, "cwd")
	// A link in the tree cannot send the write out of it (extraction refuses such a
	// link already; the write goes beneath the tree in any case).
	installErr(t, d, Options{Source: "escape@" + mk}, "points outside the plugin")
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the entry's manifest was written through a link, out of the tree: %v", ents)
	}
	stagingEmpty(t, d)
}

// owner/repo is GitHub shorthand as a plain source, as the marketplace of
// NAME@owner/repo and in entries; tests point it at a git server on loopback.
func TestOwnerRepoShorthand(t *testing.T) {
	d := newData(t)
	served := t.TempDir()
	base := gitHTTPServer(t, served)
	old := githubBase
	githubBase = base + "/"
	t.Cleanup(func() { githubBase = old })

	tools := moveInto(t, newRepoDir(t, "claude-hooks", nil), filepath.Join(served, "acme", "tools.git"))
	mono := moveInto(t, newRepoDir(t, "", map[string]string{"pkgs/sub/plugin.json": pluginJSON("sub-plugin")}), filepath.Join(served, "acme", "mono.git"))
	mk := moveInto(t, newRepoDir(t, "", map[string]string{"README": "a marketplace"}), filepath.Join(served, "acme", "market.git"))
	if _, err := extractFixture("demo", filepath.Join(mk, "plugins", "demo")); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, mk, map[string]string{".claude-plugin/marketplace.json": `{"name": "acme", "plugins": [
    {"name": "demo", "source": "./plugins/demo"},
    {"name": "claude-hooks", "source": {"source": "github", "repo": "acme/tools"}},
    {"name": "sub-plugin", "source": {"source": "git-subdir", "url": "acme/mono", "path": "pkgs/sub"}}
  ]}`})
	for _, r := range []string{tools, mono, mk} {
		run(t, r, "git", "update-server-info")
	}

	in := mustInstall(t, d, Options{Source: "acme/tools"})
	if in.Name != "claude-hooks" || in.Source != base+"/acme/tools.git" {
		t.Errorf("plain owner/repo: %+v", in.Meta)
	}
	in = mustInstall(t, d, Options{Source: "demo@acme/market"})
	if in.Source != base+"/acme/market.git" || in.Subdir != "plugins/demo" {
		t.Errorf("NAME@owner/repo: %+v", in.Meta)
	}
	es := ledger(t, d, "demo")
	if len(es) == 0 || es[len(es)-1].Marketplace != fmt.Sprintf("demo@%s/acme/market.git", base) {
		t.Errorf("ledger: %+v", es)
	}
	in = mustInstall(t, d, Options{Source: "sub-plugin@acme/market"})
	if in.Source != base+"/acme/mono.git" || in.Subdir != "pkgs/sub" {
		t.Errorf("git-subdir with owner/repo: %+v", in.Meta)
	}
	// A remote marketplace still names only network repositories: shorthand is one.
	installErr(t, d, Options{Source: "nothing@acme/market"}, "no plugin named nothing")
}

// The entry's manifest is written beneath the tree: a link where it goes cannot
// send it elsewhere, whatever let the link into the tree.
func TestEntryManifestIsWrittenBeneathTheTree(t *testing.T) {
	tree, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(tree, ".claude-plugin")); err != nil {
		t.Fatal(err)
	}
	err := entryManifest(tree, mkSource{manifest: map[string]any{"name": "x"}, strict: false})
	if err == nil {
		t.Error("the manifest was written through a link")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside the tree: %v", ents)
	}
}
