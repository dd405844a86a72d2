package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// chainDepth is how deep the folder is whose last entry points back at the plugin
// root: deep enough that a second link can walk ".." through it far above the
// root while every link still reads as "inside" on its own.
const chainDepth = 12

// plantChain writes into dir (the plugin root) a chainDepth-deep folder whose last
// entry "up" points back at the root, and a link at name that walks ups times ".."
// through it and then into rest. Read as text each link stays inside the plugin;
// followed, name lands ups folders above the root.
func plantChain(t *testing.T, dir, name string, ups int, rest string) {
	t.Helper()
	var deep []string
	for i := 1; i <= chainDepth; i++ {
		deep = append(deep, fmt.Sprintf("d%d", i))
	}
	deepDir := filepath.Join(dir, filepath.Join(deep...))
	if err := os.MkdirAll(deepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.Repeat("../", chainDepth-1)+"..", filepath.Join(deepDir, "up")); err != nil {
		t.Fatal(err)
	}
	// Git keeps no empty folders: a file beside the link keeps the chain's folders.
	os.WriteFile(filepath.Join(deepDir, "keep"), []byte("x\n"), 0o644)
	target := strings.Repeat("../", strings.Count(name, "/")) + strings.Join(deep, "/") + "/up" + strings.Repeat("/..", ups)
	if rest != "" {
		target += "/" + rest
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if c := checkLink(name, target); c != nil {
		t.Fatalf("the chain must look inside as text: %v", c)
	}
}

// snapshot lists every path under dir with its type, mode and content hash.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %s", rel, fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			line += " " + hex.EncodeToString(h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// sentinel makes a folder beside the data folder (where the chain's target lands:
// four folders above a staging tree, <data>/staging/<id>/tree) holding a file, and
// returns it with a function that fails the test if anything in it changed.
func sentinel(t *testing.T, d datadir.Dir) (string, func()) {
	t.Helper()
	s := filepath.Join(filepath.Dir(d.Root), "sentinel")
	if err := os.MkdirAll(filepath.Join(s, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s, "precious"), []byte("do not touch\n"), 0o644)
	os.WriteFile(filepath.Join(s, "inner", "also"), []byte("nor this\n"), 0o644)
	before := snapshot(t, s)
	return s, func() {
		t.Helper()
		after := snapshot(t, s)
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Fatalf("the install changed %s outside the plugin:\nbefore:\n%s\nafter:\n%s", s, strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
	}
}

// stagingUps is how many ".." above the plugin root of a staging tree reach the
// folder that holds the data folder.
const stagingUps = 4

// chainPlugin writes a plugin into dir whose build folder (".oz0" for the wheel
// path, "node_modules" for the npm path) is a chain of links to the sentinel.
func chainPlugin(t *testing.T, dir, name, path string) {
	t.Helper()
	files := map[string]string{"plugin.json": pluginJSON(name)}
	switch path {
	case "wheel":
		makeWheel(t, filepath.Join(dir, "wheels"), "evil", "1.0", nil, map[string]string{
			"evil/__init__.py":          "",
			"evil-1.0.data/scripts/git": "#!/bin/sh\necho owned\n",
		})
		files["requirements.txt"] = "evil\n"
		plantChain(t, dir, installed.SitePackages[:len(".oz0")], stagingUps, "sentinel")
	case "npm":
		if _, err := extractFixture("npm-postinstall-marker", dir); err != nil {
			t.Fatal(err)
		}
		// The fixture's name; its manifest is replaced below.
		files["package.json"] = readFile(t, filepath.Join(dir, "package.json"))
		plantChain(t, dir, "node_modules", stagingUps, "sentinel")
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A chain of links that each read as "inside" but lead outside once followed is
// refused, naming the link, from a git repository, a marketplace entry and a
// private folder alike, for the wheel and the npm build; nothing outside the
// plugin is created, changed or deleted.
func TestLinkChainOutOfThePluginRefused(t *testing.T) {
	for _, path := range []string{"wheel", "npm"} {
		for _, from := range []string{"git", "marketplace", "folder"} {
			t.Run(path+"/"+from, func(t *testing.T) {
				d := newData(t)
				if path == "npm" {
					needRuntime(t, d, false, true)
				}
				_, check := sentinel(t, d)
				name := "chain-" + path
				src := filepath.Join(t.TempDir(), "src")
				o := Options{}
				switch from {
				case "git":
					chainPlugin(t, src, name, path)
					run(t, src, "git", "init", "-q", "-b", "main")
					commitFiles(t, src, nil)
					o.Source = src
				case "marketplace":
					chainPlugin(t, filepath.Join(src, "plugins", name), name, path)
					run(t, src, "git", "init", "-q", "-b", "main")
					commitFiles(t, src, map[string]string{".claude-plugin/marketplace.json": fmt.Sprintf(
						`{"name":"mk","owner":{"name":"t"},"plugins":[{"name":%q,"source":"./plugins/%s"}]}`, name, name)})
					o.Source = name + "@" + src
				case "folder":
					chainPlugin(t, src, name, path)
					o.Source = src
				}
				want := map[string]string{"wheel": ".oz0", "npm": "node_modules"}[path]
				o.Log = quiet()
				_, err := Install(context.Background(), d, o)
				check()
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("install %s: error %v, want one naming %s", o.Source, err, want)
				}
			})
		}
	}
}

// Any link is resolved as the kernel would follow it: a chain out of the plugin is
// refused wherever it sits, naming it, and a chain that stays inside (through the
// same link back to the root) is accepted.
func TestLinkChainsResolvedPhysically(t *testing.T) {
	d := newData(t)
	_, check := sentinel(t, d)
	src := filepath.Join(t.TempDir(), "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "plugin.json"), []byte(pluginJSON("chain-elsewhere")), 0o644)
	plantChain(t, src, "assets/data", stagingUps, "sentinel")
	installErr(t, d, Options{Source: src}, "assets/data: symlink points outside the plugin once followed")
	check()

	// Through the same link that points back at the root, and back down: inside.
	os.Remove(filepath.Join(src, "assets", "data"))
	os.Symlink("../d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/up/d1/d2/keep-me", filepath.Join(src, "assets", "data"))
	os.WriteFile(filepath.Join(src, "d1", "d2", "keep-me"), []byte("inside\n"), 0o644)
	in := mustInstall(t, d, Options{Source: src})
	if got := readFile(t, filepath.Join(in.Dir, "assets", "data")); got != "inside\n" {
		t.Fatalf("the inside chain reads %q", got)
	}

	// Through a folder that does not exist yet (the build would create it) and back
	// out of it: still followed, still outside.
	os.Remove(filepath.Join(src, "assets", "data"))
	os.Symlink("../node_modules/x/../../d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/up/../../../../sentinel", filepath.Join(src, "assets", "data"))
	installErr(t, newData(t), Options{Source: src}, "assets/data: symlink points outside the plugin once followed")

	// An absolute link, and a loop, are refused too.
	for target, want := range map[string]string{"/etc": "points outside the plugin", "loop": "more than 40 links"} {
		os.Remove(filepath.Join(src, "assets", "data"))
		os.Symlink(target, filepath.Join(src, "assets", "data"))
		os.Remove(filepath.Join(src, "assets", "loop"))
		os.Symlink("data", filepath.Join(src, "assets", "loop"))
		installErr(t, newData(t), Options{Source: src}, want)
	}
	check()
}

// The wheel build itself creates every folder and file beneath the plugin tree and
// never through a link, even on a tree that was not checked first.
func TestWheelUnpackStaysBeneathTheTree(t *testing.T) {
	d := newData(t)
	s, check := sentinel(t, d)
	tree := filepath.Join(t.TempDir(), "tree")
	makeWheel(t, filepath.Join(tree, "wheels"), "evil", "1.0", nil, map[string]string{
		"evil/__init__.py":          "",
		"evil-1.0.data/scripts/git": "#!/bin/sh\necho owned\n",
	})
	for _, link := range []string{s, "wheels/../../" + filepath.Base(filepath.Dir(d.Root)) + "/sentinel"} {
		os.Remove(filepath.Join(tree, ".oz0"))
		if err := os.Symlink(link, filepath.Join(tree, ".oz0")); err != nil {
			t.Fatal(err)
		}
		b := &builder{log: quiet(), d: d, tree: tree, staging: t.TempDir(), plugin: "evil-wheel", commit: "c"}
		err := b.unpackWheels([]requirement{{name: "evil", raw: "evil", by: "test"}})
		if err == nil || !strings.Contains(err.Error(), ".oz0 is not a folder") {
			t.Fatalf(".oz0 -> %s: %v", link, err)
		}
		check()
	}
}
