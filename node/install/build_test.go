package install

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// findMarkers lists every file named like a build marker under the given roots.
func findMarkers(roots ...string) []string {
	var out []string
	for _, r := range roots {
		filepath.WalkDir(r, func(p string, de fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(de.Name(), "-MARKER") {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

func needRuntime(t *testing.T, d datadir.Dir, python, npm bool) {
	t.Helper()
	rs, err := installed.LoadRuntimes(d)
	if err != nil {
		t.Fatal(err)
	}
	if python && rs.Python == nil {
		t.Skip("no managed Python (/usr/bin/python3): Python builds not tested")
	}
	if npm && (rs.Node == nil || rs.NPM == "") {
		t.Skip("no managed Node.js with npm: npm builds not tested")
	}
	if python {
		if err := exec.Command(rs.Python.Path, "-m", "pip", "--version").Run(); err != nil {
			t.Skip("the managed Python has no pip: exempt Python builds not tested")
		}
	}
}

// Under strict, a plugin whose pyproject.toml names a build backend is refused with
// a message naming the backend and the exemption it needs, and the backend never
// runs. With the exemption (or under auto) it runs, as the node's user.
func TestPythonBuildBackendRunsOnlyWhenExempt(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, true, false)
	repo, commit := newRepo(t, "py-build-marker", runsSomething)

	_, err := Install(context.Background(), d, Options{Source: repo, Log: quiet()})
	if !errors.Is(err, ErrBuildRefused) {
		t.Fatalf("strict install: %v, want a build refusal", err)
	}
	for _, want := range []string{"build backend marker_backend", "--plugin-sandbox-exempt py-build-marker@" + commit} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if m := findMarkers(d.Root, repo); len(m) != 0 {
		t.Fatalf("the build backend ran under strict: %v", m)
	}
	if _, err := installed.Lookup(d, "py-build-marker"); !errors.Is(err, installed.ErrNotInstalled) {
		t.Fatalf("refused plugin is installed: %v", err)
	}

	// A private candidate is never exempt.
	_, err = Install(context.Background(), d, Options{Source: repo, Private: true, Log: quiet(),
		Exemptions: []policy.Exemption{{Name: "py-build-marker"}}})
	if !errors.Is(err, ErrBuildRefused) || !strings.Contains(err.Error(), "private candidate") {
		t.Fatalf("private exempt install: %v", err)
	}
	if m := findMarkers(d.Root, repo); len(m) != 0 {
		t.Fatalf("the build backend ran for a private candidate: %v", m)
	}

	in := mustInstall(t, d, Options{Source: repo, Exemptions: []policy.Exemption{{Name: "py-build-marker", Commit: commit[:8]}}})
	marker := readFile(t, filepath.Join(in.Dir, "BUILD-MARKER"))
	if !strings.Contains(marker, fmt.Sprintf("build_wheel uid=%d", os.Getuid())) {
		t.Fatalf("exempt build: marker %q, want build_wheel as uid %d", marker, os.Getuid())
	}
	if _, err := os.Stat(filepath.Join(in.Dir, installed.SitePackages, "py_build_marker", "__init__.py")); err != nil {
		t.Fatalf("the built package is not in %s: %v", installed.SitePackages, err)
	}
	es := ledger(t, d, "py-build-marker")
	if len(es) != 1 || !es[0].Build.PackageCode {
		t.Fatalf("ledger does not record that package code ran: %+v", es)
	}

	d2 := newData(t)
	in = mustInstall(t, d2, Options{Source: repo, Mode: policy.Auto})
	if _, err := os.Stat(filepath.Join(in.Dir, "BUILD-MARKER")); err != nil {
		t.Fatalf("auto mode: the build did not run: %v", err)
	}
}

// Under strict, Python dependencies come from the plugin's wheels only, unpacked
// without running anything; a dependency with no wheel is refused by name.
func TestPythonWheelsOnlyUnderStrict(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, false)
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":      builtJSON("py-wheels"),
		"pyproject.toml":   "[project]\nname = \"py-wheels\"\ndependencies = [\n  \"alpha>=1.0\", # the one we use\n  \"gamma; sys_platform == 'win32'\",\n]\n",
		"requirements.txt": "# pinned\nbeta==2.0 --hash=sha256:00\n",
	})
	wheels := filepath.Join(repo, "wheels")
	makeWheel(t, wheels, "alpha", "0.9", nil, map[string]string{"alpha/__init__.py": "OLD = True\n"})
	makeWheel(t, wheels, "alpha", "1.2", []string{"delta (>=1)", "extra-only; extra == 'dev'"}, map[string]string{"alpha/__init__.py": "NEW = True\n"})
	makeWheel(t, wheels, "beta", "2.0", nil, map[string]string{
		"beta.py": "B = 1\n", "beta-2.0.data/scripts/beta-cli": "#!/bin/sh\n",
	})
	commitFiles(t, repo, nil)
	installErr(t, d, Options{Source: repo}, "python dependency delta (>=1) (required by alpha-1.2-py3-none-any.whl): no wheel for it in wheels/")
	if m, _ := filepath.Glob(filepath.Join(d.Plugins(), "py-wheels")); len(m) != 0 {
		t.Fatal("a refused build left the plugin folder")
	}

	makeWheel(t, wheels, "Delta", "1.0", nil, map[string]string{"delta.py": "D = 1\n"})
	commitFiles(t, repo, nil)
	in := mustInstall(t, d, Options{Source: repo})
	site := filepath.Join(in.Dir, installed.SitePackages)
	if got := readFile(t, filepath.Join(site, "alpha", "__init__.py")); got != "NEW = True\n" {
		t.Fatalf("alpha: the newest fitting wheel was not chosen: %q", got)
	}
	for _, p := range []string{"beta.py", "delta.py", "alpha-1.2.dist-info/METADATA", "../bin/beta-cli"} {
		if _, err := os.Stat(filepath.Join(site, p)); err != nil {
			t.Errorf("%s not unpacked: %v", p, err)
		}
	}
	if !strings.Contains(in.Build, "unpacked alpha-1.2-py3-none-any.whl") {
		t.Errorf("build record %q does not list the wheels", in.Build)
	}
	if rs, _ := installed.LoadRuntimes(d); rs.Python != nil {
		c := exec.Command(rs.Python.Path, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import alpha, beta, delta; print(alpha.NEW, beta.B, delta.D)", site)
		if out, err := c.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "True 1 1" {
			t.Fatalf("unpacked packages do not import: %v %s", err, out)
		}
	}

	bad, _ := newRepo(t, "", map[string]string{"plugin.json": builtJSON("py-bad"), "requirements.txt": "-e git+https://example.com/x.git#egg=x\n"})
	installErr(t, d, Options{Source: bad}, "requirements.txt line 1")
	direct, _ := newRepo(t, "", map[string]string{"plugin.json": builtJSON("py-direct"), "pyproject.toml": "[project]\ndependencies = ['x @ https://example.com/x.whl']\n"})
	installErr(t, d, Options{Source: direct}, "direct reference")
	setup, _ := newRepo(t, "", map[string]string{"plugin.json": builtJSON("py-setup"), "setup.py": "raise SystemExit('ran')\n"})
	installErr(t, d, Options{Source: setup}, "setup.py would have to run")
}

// Under strict, npm runs with lifecycle scripts disabled: the fixture's own
// preinstall/postinstall and its local dependency's install script never run; the
// dependency is still installed. Exempt, they run as the node's user.
func TestNPMScriptsRunOnlyWhenExempt(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	repo, commit := newRepo(t, "npm-postinstall-marker", runsSomething)

	in := mustInstall(t, d, Options{Source: repo})
	if m := findMarkers(d.Root, repo); len(m) != 0 {
		t.Fatalf("npm lifecycle scripts ran under strict: %v", m)
	}
	if _, err := os.Stat(filepath.Join(in.Dir, "node_modules", "marker-dep", "index.js")); err != nil {
		t.Fatalf("the local dependency was not installed: %v", err)
	}
	if !strings.Contains(in.Build, "ignore-scripts") {
		t.Errorf("build record %q", in.Build)
	}

	d2 := newData(t)
	in = mustInstall(t, d2, Options{Source: repo, Exemptions: []policy.Exemption{{Name: "npm-postinstall-marker", Commit: commit}}})
	uid := fmt.Sprintf("uid=%d", os.Getuid())
	if got := readFile(t, filepath.Join(in.Dir, "NPM-MARKER")); !strings.Contains(got, "postinstall "+uid) {
		t.Fatalf("exempt: NPM-MARKER %q, want postinstall as %s", got, uid)
	}
	if got := readFile(t, filepath.Join(in.Dir, "DEP-MARKER")); !strings.Contains(got, "install "+uid) {
		t.Fatalf("exempt: DEP-MARKER %q", got)
	}

	// Tier 0 and the auto and off modes build as the node's user too.
	for _, o := range []Options{{Tier0: true}, {Mode: policy.Auto}, {Mode: policy.Off}} {
		o.Source = repo
		in := mustInstall(t, newData(t), o)
		if _, err := os.Stat(filepath.Join(in.Dir, "NPM-MARKER")); err != nil {
			t.Errorf("tier0=%v mode=%s: scripts did not run: %v", o.Tier0, o.Mode, err)
		}
	}

	// A project .npmrc that turns scripts back on is set aside while npm runs under
	// strict, and is still part of the installed plugin.
	commitFiles(t, repo, map[string]string{".npmrc": "ignore-scripts=false\n"})
	d3 := newData(t)
	in = mustInstall(t, d3, Options{Source: repo})
	if m := findMarkers(d3.Root); len(m) != 0 {
		t.Fatalf("a project .npmrc re-enabled scripts under strict: %v", m)
	}
	if got := readFile(t, filepath.Join(in.Dir, ".npmrc")); got != "ignore-scripts=false\n" {
		t.Fatalf(".npmrc not restored: %q", got)
	}
}

// Dependencies from git, URLs or paths outside the plugin are refused by name
// before npm runs, in package.json and in the lockfile.
func TestNPMNonRegistryDependenciesRefused(t *testing.T) {
	d := newData(t)
	needRuntime(t, d, false, true)
	for _, c := range []struct{ dep, spec, want string }{
		{"gitdep", "git+https://example.com/x.git", "npm dependency gitdep in package.json is a git dependency"},
		{"ghdep", "someone/somerepo#main", "npm dependency ghdep in package.json is a GitHub dependency"},
		{"tarball", "https://example.com/x.tgz", "npm dependency tarball in package.json is a URL dependency"},
		{"outside", "file:../../elsewhere", "npm dependency outside in package.json is a local dependency outside the plugin folder"},
		{"alias", "npm:x@git+ssh://example.com/x.git", "npm dependency alias in package.json is a git dependency"},
	} {
		repo, _ := newRepo(t, "", map[string]string{
			"plugin.json":  builtJSON("npm-bad"),
			"package.json": fmt.Sprintf(`{"name":"npm-bad","version":"1.0.0","dependencies":{%q:%q}}`, c.dep, c.spec),
		})
		_, err := Install(context.Background(), d, Options{Source: repo, Log: quiet()})
		if !errors.Is(err, ErrBuildRefused) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--plugin-sandbox-exempt npm-bad@") {
			t.Errorf("%s: %v", c.spec, err)
		}
	}
	lock := `{"name":"npm-lock","lockfileVersion":3,"packages":{"":{"dependencies":{"x":"^1.0.0"}},` +
		`"node_modules/x":{"version":"1.0.0","resolved":"https://registry.npmjs.org/x/-/x-1.0.0.tgz"},` +
		`"node_modules/x/node_modules/y":{"version":"1.0.0","resolved":"git+ssh://git@example.com/y.git#abc"}}}`
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":       builtJSON("npm-lock"),
		"package.json":      `{"name":"npm-lock","version":"1.0.0","dependencies":{"x":"^1.0.0"}}`,
		"package-lock.json": lock,
	})
	installErr(t, d, Options{Source: repo}, "npm dependency y in package-lock.json is a git dependency")
}

func TestNPMSpecProblems(t *testing.T) {
	for spec, bad := range map[string]bool{
		"^1.2.3": false, "latest": false, "1.x || >=2.5.0": false, "npm:other@^2": false,
		"file:./vendor/x": false, "file:vendor/../vendor/x": false, "link:../x": true,
		"github:a/b": true, "a/b": true, "git@github.com:a/b.git": true, "http://x/y.tgz": true,
		"/abs/path": true, "~/x": true, "file:../x": true,
	} {
		if got := npmSpecProblem(".", spec) != ""; got != bad {
			t.Errorf("npmSpecProblem(%q) refused=%v, want %v", spec, got, bad)
		}
	}
}

func TestVersionsAndMarkers(t *testing.T) {
	for _, c := range []struct {
		v, spec string
		ok      bool
	}{
		{"1.2", ">=1.0", true}, {"0.9", ">=1.0", false}, {"2.0", "==2.*", true}, {"2.0.1", "==2.0", false},
		{"1.4.2", "~=1.4", true}, {"2.0", "~=1.4", false}, {"1.0", "!=1.0", false}, {"1.0rc1", "<2", true},
	} {
		if got := versionSatisfies(c.v, c.spec); got != c.ok {
			t.Errorf("%s %s = %v", c.v, c.spec, got)
		}
	}
	if markerHolds(`sys_platform == "win32"`, "3.11") || !markerHolds(`python_version >= "3.8"`, "3.11") || markerHolds(`extra == "dev"`, "3.11") ||
		markerHolds(`python_version >= "3.12"`, "3.11") || !markerHolds(`python_version >= "3.12"`, "3.13") {
		t.Error("markers")
	}
}

// pyproject.toml is read as TOML: comments, multi-line arrays, literal and escaped
// strings, dotted keys and tables the build does not read; a file that is not
// TOML, or dependencies that are not strings, are errors naming the file.
func TestParsePyproject(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       pyProject
		err        string
	}{
		{"tables", "[build-system]\nrequires = [\"hatchling\"]  # x\nbuild-backend = 'hatchling.build'\n[tool.x]\ny = [[1,2],[3]]\n[project]\ndependencies = [\"a[b]>=1\",\n \"c\"]\n",
			pyProject{buildSystem: true, backend: "hatchling.build", deps: []string{"a[b]>=1", "c"}}, ""},
		{"no build system", "[project]\nname = \"p\"\ndependencies = [\n  \"alpha>=1.0\", # the one we use\n  \"gamma; sys_platform == 'win32'\",\n]\n",
			pyProject{deps: []string{"alpha>=1.0", "gamma; sys_platform == 'win32'"}}, ""},
		{"dotted keys", "build-system.requires = []\nproject.dependencies = ['x @ https://example.com/x.whl']\n",
			pyProject{buildSystem: true, deps: []string{"x @ https://example.com/x.whl"}}, ""},
		{"escapes", "[project]\ndependencies = [\"caf\\u00e9\", '''d\\e''']\n",
			pyProject{deps: []string{"caf\u00e9", `d\e`}}, ""},
		{"empty", "", pyProject{}, ""},
		{"not toml", "[project]\ndependencies = [\"a\"\n", pyProject{}, "pyproject.toml: "},
		{"duplicate key", "[project]\nname = \"a\"\nname = \"b\"\n", pyProject{}, "pyproject.toml: "},
		{"not strings", "[project]\ndependencies = [1, 2]\n", pyProject{}, "project.dependencies must be an array of strings"},
		{"not an array", "[project]\ndependencies = \"a\"\n", pyProject{}, "project.dependencies must be an array of strings"},
	} {
		got, err := parsePyproject([]byte(c.toml))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v %v, want an error containing %q", c.name, got, err, c.err)
			}
			continue
		}
		if err != nil || got.buildSystem != c.want.buildSystem || got.backend != c.want.backend || !slices.Equal(got.deps, c.want.deps) {
			t.Errorf("%s: %+v %v, want %+v", c.name, got, err, c.want)
		}
	}
}

func FuzzParsePyproject(f *testing.F) {
	f.Add([]byte("[build-system]\nbuild-backend = 'x'\n[project]\ndependencies = [\"a\", 'b']\n"))
	f.Add([]byte("project.dependencies = [1]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePyproject(b)
		if err != nil && (p.buildSystem || p.backend != "" || p.deps != nil) {
			t.Fatalf("an error with a result: %+v %v", p, err)
		}
	})
}

// The Python a strict build judges markers and wheel tags against is the one the
// node's runtimes.json records for this data folder, read by that build (not
// whatever an earlier build in the same process saw): a py3X wheel and a marker on
// python_version follow it.
func TestStrictBuildTargetsTheRecordedPython(t *testing.T) {
	repo, _ := newRepo(t, "", map[string]string{
		"plugin.json":      builtJSON("py-target"),
		"requirements.txt": "alpha\nold-only; python_version < \"3.12\"\n",
	})
	wheels := filepath.Join(repo, "wheels")
	w := makeWheel(t, wheels, "alpha", "1.0", nil, map[string]string{"alpha.py": "A = 1\n"})
	if err := os.Rename(w, filepath.Join(wheels, "alpha-1.0-py313-none-any.whl")); err != nil {
		t.Fatal(err)
	}
	commitFiles(t, repo, nil)
	recorded := func(version string) datadir.Dir {
		d := newData(t)
		if err := d.Create(false); err != nil {
			t.Fatal(err)
		}
		rs := installed.RuntimeSet{Python: &installed.Runtime{Name: "python", Command: "/usr/bin/python3", Path: "/usr/bin/python3", Version: version}}
		b, _ := json.Marshal(rs)
		if err := os.WriteFile(d.Runtimes(), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Under 3.13 the py313 wheel fits and old-only's marker excludes it.
	in := mustInstall(t, recorded("3.13"), Options{Source: repo})
	if _, err := os.Stat(filepath.Join(in.Dir, installed.SitePackages, "alpha.py")); err != nil {
		t.Fatalf("Python 3.13 recorded: the py313 wheel was not unpacked: %v", err)
	}
	// Under 3.11 the py313 wheel does not fit (and old-only would be needed too).
	installErr(t, recorded("3.11"), Options{Source: repo}, "python dependency alpha (required by requirements.txt line 1): none of the 1 wheels for it in wheels/ fits Python 3.11")
	// Again under 3.13 after a 3.11 build in this process: still 3.13's rules.
	mustInstall(t, recorded("3.13"), Options{Source: repo})
}

// Strict builds may take wheels from an index the operator configured: the simple
// page is read, a fitting wheel downloaded and its sha256 checked; a wheel whose
// hash does not match is refused, and sdists are never taken.
func TestPythonIndexWheels(t *testing.T) {
	d := newData(t)
	files := t.TempDir()
	good := makeWheel(t, files, "remote", "1.5", nil, map[string]string{"remote.py": "R = 15\n"})
	makeWheel(t, files, "remote", "2.0", nil, map[string]string{"remote.py": "R = 20\n"})
	os.WriteFile(filepath.Join(files, "remote-3.0.tar.gz"), []byte("an sdist"), 0o644)
	sum := func(p string) string {
		b, _ := os.ReadFile(p)
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}
	badHash := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/remote/":
			h15 := sum(good)
			if badHash {
				h15 = strings.Repeat("0", 64)
			}
			fmt.Fprintf(w, `<html><body>
<a href="../../files/remote-1.5-py3-none-any.whl#sha256=%s">remote-1.5-py3-none-any.whl</a>
<a href="../../files/remote-2.0-py3-none-any.whl" data-yanked="broken">remote-2.0-py3-none-any.whl</a>
<a href="../../files/remote-3.0.tar.gz">remote-3.0.tar.gz</a>
</body></html>`, h15)
		default:
			if p, ok := strings.CutPrefix(r.URL.Path, "/files/"); ok {
				http.ServeFile(w, r, filepath.Join(files, filepath.Base(p)))
				return
			}
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	repo, _ := newRepo(t, "", map[string]string{"plugin.json": builtJSON("py-index"), "requirements.txt": "remote>=1\n"})

	installErr(t, d, Options{Source: repo}, "python dependency remote>=1 (required by requirements.txt line 1): no wheel for it in wheels/, and no Python package index was given (plugin install --python-index URL")
	in := mustInstall(t, d, Options{Source: repo, PythonIndex: srv.URL + "/simple"})
	if got := readFile(t, filepath.Join(in.Dir, installed.SitePackages, "remote.py")); got != "R = 15\n" {
		t.Fatalf("remote.py = %q: the yanked 2.0 or the sdist was taken", got)
	}
	if !strings.Contains(in.Build, "downloaded remote-1.5-py3-none-any.whl from "+srv.URL) {
		t.Errorf("build record %q", in.Build)
	}
	badHash = true
	d2 := newData(t)
	installErr(t, d2, Options{Source: repo, PythonIndex: srv.URL + "/simple"}, "does not match the index's sha256")
}
