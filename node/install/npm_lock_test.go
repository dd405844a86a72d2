package install

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/installed"
)

// A lockfile's package key is where npm puts the package: a key that leaves
// node_modules/ (a .. element, an absolute path, a backslash, an empty element)
// or names no package below it is refused; plain keys, nested and scoped ones,
// capitals of old registry names and workspace folders pass.
func TestNPMLockKeys(t *testing.T) {
	for k, bad := range map[string]bool{
		"":                                      false,
		"node_modules/x":                        false,
		"node_modules/@scope/x":                 false,
		"node_modules/x/node_modules/y":         false,
		"node_modules/@s/x/node_modules/@t/y":   false,
		"node_modules/JSONStream":               false,
		"packages/app":                          false,
		"packages/app/node_modules/x":           false,
		"node_modules/../../x":                  true,
		"node_modules/x/../../../y":             true,
		"node_modules/x/node_modules/..":        true,
		"../x":                                  true,
		"..":                                    true,
		"./node_modules/x":                      true,
		"node_modules//x":                       true,
		"node_modules/x/":                       true,
		"/abs/node_modules/x":                   true,
		"/tmp/x":                                true,
		`node_modules\..\..\x`:                  true,
		`node_modules/x\..\..\y`:                true,
		"node_modules":                          true,
		"node_modules/x/extra":                  true,
		"node_modules/@scope":                   true,
		"node_modules/.bin":                     true,
		"node_modules/_x":                       true,
		"node_modules/x y":                      true,
		"node_modules/x/node_modules/.hidden":   true,
		"packages/app/node_modules/../../../up": true,
	} {
		if got := lockKeyProblem(k); (got != "") != bad {
			t.Errorf("lockKeyProblem(%q) = %q, want refused %v", k, got, bad)
		}
	}
}

// An npm: alias names a registry package and the range to take: without the
// range, or naming no package, it is refused; its range is checked as any.
func TestNPMAliasSpecs(t *testing.T) {
	for spec, want := range map[string]string{
		"npm:other@^2":            "",
		"npm:@scope/other@1.0.0":  "",
		"npm:JSONStream@1.3.5":    "",
		"npm:other":               "an npm: alias without a version",
		"npm:@scope/other":        "an npm: alias without a version",
		"npm:other@":              "an npm: alias without a version",
		"npm:other@ ":             "an npm: alias without a version",
		"npm:github:a/b":          "an npm: alias without a version",
		"npm:https://x/y.tgz":     "an npm: alias without a version",
		"npm:../x@1.0.0":          "an npm: alias of no registry package",
		"npm:a/b@1.0.0":           "an npm: alias of no registry package",
		"npm:git+ssh://x.git@1":   "an npm: alias of no registry package",
		"npm:other@github:a/b":    "a git dependency",
		"npm:other@file:../x":     "a local dependency outside the plugin folder",
		"npm:other@https://x/y.z": "a URL dependency",
	} {
		got := npmSpecProblem(".", spec)
		if want == "" && got != "" || want != "" && !strings.HasPrefix(got, want) {
			t.Errorf("npmSpecProblem(%q) = %q, want %q", spec, got, want)
		}
	}
}

// Installed from the npm fixture's repository under strict, a lockfile with a
// key that leaves node_modules/ (or, in a version 1 lockfile, a name that is no
// package's), and a package.json with an npm: alias without a version, are refused before npm runs, naming the entry and the exemption
// that would allow the build; nothing is installed and no script ran.
func TestNPMLockKeyLeavingNodeModulesRefusedAtInstall(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	src, err := fixtures.Extract("npm-postinstall-marker", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	// lockWith is the fixture's lockfile with one more package, at key.
	lockWith := func(key string) string {
		var lk map[string]any
		if err := json.Unmarshal(base, &lk); err != nil {
			t.Fatal(err)
		}
		lk["packages"].(map[string]any)[key] = map[string]any{"resolved": "deps/marker-dep", "link": true}
		b, _ := json.MarshalIndent(lk, "", "  ")
		return string(b)
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"key with ..", map[string]string{"package-lock.json": lockWith("node_modules/../../escape")}, `npm package "node_modules/../../escape" in package-lock.json is not a plain path`},
		{"absolute key", map[string]string{"package-lock.json": lockWith("/tmp/oz0-escape/node_modules/x")}, `npm package "/tmp/oz0-escape/node_modules/x" in package-lock.json is an absolute path`},
		{"key with backslashes", map[string]string{"package-lock.json": lockWith(`node_modules\..\..\escape`)}, `npm package "node_modules\\..\\..\\escape" in package-lock.json has a backslash`},
		{"version 1 lockfile name with ..", map[string]string{"package-lock.json": `{"name":"npm-postinstall-marker","lockfileVersion":1,"dependencies":{"marker-dep":{"version":"file:deps/marker-dep"},"../../escape":{"version":"1.0.0","resolved":"https://registry.example/x/-/x-1.0.0.tgz"}}}`},
			`npm dependency "../../escape" in package-lock.json is no package name`},
		{"alias without a version", map[string]string{"package.json": `{"name":"npm-postinstall-marker","version":"0.1.0","private":true,"scripts":{"postinstall":"node mark.js postinstall"},"dependencies":{"marker-dep":"file:./deps/marker-dep","quiet":"npm:left-pad"}}`},
			"npm dependency quiet in package.json is an npm: alias without a version (npm:left-pad)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.files[".mcp.json"] = runsSomething[".mcp.json"] // a server of the plugin's own, so its build is made
			repo, _ := newRepo(t, "npm-postinstall-marker", c.files)
			_, err := Install(context.Background(), d, Options{Source: repo, Log: quiet()})
			if !errors.Is(err, ErrBuildRefused) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--plugin-sandbox-exempt npm-postinstall-marker@") {
				t.Fatalf("install: %v\nwant a refused build naming %s", err, c.want)
			}
			if _, err := installed.Current(d, "npm-postinstall-marker"); err == nil {
				t.Error("the plugin is installed after its build was refused")
			}
			if m := findMarkers(d.Root, repo); len(m) != 0 {
				t.Errorf("package code ran: %v", m)
			}
		})
	}
}
