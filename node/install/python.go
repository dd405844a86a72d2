package install

import (
	"archive/zip"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"oz0.ai/node/node/installed"
)

// pyProject is what the build reads from pyproject.toml.
type pyProject struct {
	buildSystem bool     // a [build-system] table: installing the project runs its backend
	backend     string   // build-system.build-backend
	deps        []string // project.dependencies
}

// parsePyproject reads from pyproject.toml the two tables the build needs.
func parsePyproject(b []byte) (pyProject, error) {
	var doc struct {
		BuildSystem struct {
			Backend any `toml:"build-backend"`
		} `toml:"build-system"`
		Project struct {
			Dependencies any `toml:"dependencies"`
		} `toml:"project"`
	}
	md, err := toml.Decode(string(b), &doc)
	if err != nil {
		return pyProject{}, fmt.Errorf("pyproject.toml: %w", err)
	}
	p := pyProject{buildSystem: md.IsDefined("build-system")}
	p.backend, _ = doc.BuildSystem.Backend.(string)
	if d := doc.Project.Dependencies; d != nil {
		arr, ok := d.([]any)
		for _, v := range arr {
			s, isString := v.(string)
			ok = ok && isString
			p.deps = append(p.deps, s)
		}
		if !ok {
			return pyProject{}, errors.New("pyproject.toml: project.dependencies must be an array of strings")
		}
	}
	return p, nil
}

// requirement is one Python dependency.
type requirement struct {
	name   string // normalised (PEP 503)
	raw    string
	specs  []string // e.g. ">=1.0", "==2.*"
	marker string   // the environment marker after ";" ("" when none)
	by     string   // what asked for it
}

var (
	reqNameRE  = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$`)
	normNameRE = regexp.MustCompile(`[-_.]+`)
)

func normName(s string) string { return strings.ToLower(normNameRE.ReplaceAllString(s, "-")) }

// parseRequirement parses "name[extras] specs ; marker"; whether the marker lets it
// apply on this node is appliesTo's to say.
func parseRequirement(s, by string) (requirement, error) {
	s = strings.TrimSpace(s)
	spec, marker, _ := strings.Cut(s, ";")
	m := reqNameRE.FindStringSubmatch(strings.TrimSpace(spec))
	if m == nil {
		return requirement{}, fmt.Errorf("python dependency %q (from %s): not a requirement", s, by)
	}
	r := requirement{name: normName(m[1]), raw: s, marker: strings.TrimSpace(marker), by: by}
	rest := strings.TrimSpace(m[3])
	if strings.HasPrefix(rest, "@") {
		return r, fmt.Errorf("python dependency %s (from %s) is a direct reference (%s), not a wheel from wheels/", m[1], by, strings.TrimSpace(rest[1:]))
	}
	rest = strings.Trim(rest, "()")
	for _, sp := range strings.Split(rest, ",") {
		if sp = strings.ReplaceAll(strings.TrimSpace(sp), " ", ""); sp != "" {
			r.specs = append(r.specs, sp)
		}
	}
	return r, nil
}

// appliesTo reports whether r is needed with Python py ("3.X") on this OS: its
// marker, if any, holds.
func (r requirement) appliesTo(py string) bool {
	return r.marker == "" || markerHolds(r.marker, py)
}

// markerHolds evaluates an environment marker for Python pyVer ("3.X") on this OS,
// well enough for dependency lists: clauses joined by "and"/"or" (no parentheses)
// on python_version, sys_platform, platform_system, os_name and extra. What it
// cannot read it takes as true, so such a dependency is required rather than
// silently dropped.
func markerHolds(m, pyVer string) bool {
	env := map[string]string{
		"python_version": pyVer, "python_full_version": pyVer,
		"sys_platform": runtime.GOOS, "platform_system": map[string]string{"linux": "Linux", "darwin": "Darwin"}[runtime.GOOS],
		"os_name": "posix", "extra": "",
	}
	clauseRE := regexp.MustCompile(`^\s*([a-z_]+)\s*(==|!=|>=|<=|>|<|~=|not in|in)\s*["']([^"']*)["']\s*$`)
	for _, alt := range strings.Split(m, " or ") {
		all := true
		for _, c := range strings.Split(alt, " and ") {
			cm := clauseRE.FindStringSubmatch(c)
			if cm == nil {
				continue
			}
			v, known := env[cm[1]]
			if !known {
				continue
			}
			var holds bool
			switch {
			case cm[1] == "python_version" || cm[1] == "python_full_version":
				holds = versionSatisfies(v, cm[2]+cm[3])
			case cm[2] == "==":
				holds = v == cm[3]
			case cm[2] == "!=":
				holds = v != cm[3]
			case cm[2] == "in":
				holds = strings.Contains(cm[3], v) && v != ""
			case cm[2] == "not in":
				holds = !strings.Contains(cm[3], v) || v == ""
			default:
				holds = true
			}
			if !holds {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// fallbackPython is the Python ("3.X") markers and wheel tags are judged against
// when the node records no managed Python: Debian 12's.
const fallbackPython = "3.11"

// targetPython is the managed Python's "3.X" that this build's markers and wheel
// tags are judged against, read from the node's runtimes once per build.
func (b *builder) targetPython() (string, error) {
	if b.pyTarget != "" {
		return b.pyTarget, nil
	}
	rs, err := installed.LoadRuntimes(b.d)
	if err != nil {
		return "", err
	}
	b.pyTarget = fallbackPython
	if rs.Python != nil && rs.Python.Version != "" {
		b.pyTarget = rs.Python.Version
	}
	return b.pyTarget, nil
}

// releaseOf parses the release part of a version ("1.2.3rc1" → [1 2 3]).
func releaseOf(v string) []int {
	v = strings.TrimPrefix(strings.ToLower(v), "v")
	if i := strings.IndexByte(v, '!'); i >= 0 {
		v = v[i+1:]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		j := 0
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == 0 {
			break
		}
		n, _ := strconv.Atoi(p[:j])
		out = append(out, n)
		if j < len(p) {
			break
		}
	}
	return out
}

func cmpRelease(a, b []int) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

var specRE = regexp.MustCompile(`^(===|==|!=|>=|<=|~=|>|<)(.+)$`)

// versionSatisfies checks one specifier against a version, on release numbers
// (pre- and post-release tags are not distinguished).
func versionSatisfies(v, spec string) bool {
	m := specRE.FindStringSubmatch(spec)
	if m == nil {
		return true
	}
	op, want := m[1], m[2]
	if op == "===" {
		return v == want
	}
	if strings.HasSuffix(want, ".*") && (op == "==" || op == "!=") {
		pre := releaseOf(strings.TrimSuffix(want, ".*"))
		got := releaseOf(v)
		match := len(got) >= len(pre) && cmpRelease(got[:len(pre)], pre) == 0
		return match == (op == "==")
	}
	c := cmpRelease(releaseOf(v), releaseOf(want))
	switch op {
	case "==":
		return c == 0
	case "!=":
		return c != 0
	case ">=":
		return c >= 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case "<":
		return c < 0
	case "~=":
		w := releaseOf(want)
		if len(w) < 2 {
			return c >= 0
		}
		got := releaseOf(v)
		return c >= 0 && len(got) >= len(w)-1 && cmpRelease(got[:len(w)-1], w[:len(w)-1]) == 0
	}
	return true
}

// wheel is a .whl file in the plugin's wheels/ folder or downloaded from the
// operator's index.
type wheel struct {
	file    string // path: relative to the plugin root when inTree, else absolute
	inTree  bool   // one of the plugin's own, opened beneath the plugin tree
	name    string // normalised
	dist    string // as in the file name
	version string
	tags    [3]string
}

func parseWheelName(p string) (wheel, bool) {
	base := strings.TrimSuffix(filepath.Base(p), ".whl")
	parts := strings.Split(base, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return wheel{}, false
	}
	n := len(parts)
	return wheel{file: p, name: normName(parts[0]), dist: parts[0], version: parts[1],
		tags: [3]string{parts[n-3], parts[n-2], parts[n-1]}}, true
}

// compatible reports whether a wheel's tags fit Python py ("3.X") on this OS.
func (w wheel) compatible(py string) bool {
	minor := strings.TrimPrefix(py, "3.")
	pyOK := false
	for _, t := range strings.Split(w.tags[0], ".") {
		if t == "py3" || t == "py"+"3"+minor || t == "cp3"+minor || (strings.HasPrefix(t, "cp3") && w.tags[1] == "abi3") {
			pyOK = true
		}
	}
	abiOK := false
	for _, t := range strings.Split(w.tags[1], ".") {
		if t == "none" || t == "abi3" || t == "cp3"+minor {
			abiOK = true
		}
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		arch = "arm64"
	}
	platOK := false
	for _, t := range strings.Split(w.tags[2], ".") {
		switch {
		case t == "any":
			platOK = true
		case runtime.GOOS == "linux" && strings.Contains(t, "linux") && strings.HasSuffix(t, arch) && !strings.Contains(t, "musllinux"):
			platOK = true
		case runtime.GOOS == "darwin" && strings.HasPrefix(t, "macosx") && (strings.HasSuffix(t, arch) || strings.HasSuffix(t, "universal2")):
			platOK = true
		}
	}
	return pyOK && abiOK && platOK
}

// python applies the Python build rules.
func (b *builder) python() error {
	var proj pyProject
	hasProj := b.exists("pyproject.toml")
	if hasProj {
		raw, err := b.readPluginFile("pyproject.toml")
		if err != nil {
			return fmt.Errorf("read pyproject.toml: %w", err)
		}
		if proj, err = parsePyproject(raw); err != nil {
			return err
		}
	}
	hasSetup := b.exists("setup.py")
	hasReqs := b.exists("requirements.txt")
	builds := proj.buildSystem || hasSetup
	if !builds && len(proj.deps) == 0 && !hasReqs && len(b.pyLaunch) == 0 {
		return nil
	}
	if len(b.pyLaunch) > 0 {
		rs, err := installed.LoadRuntimes(b.d)
		if err != nil {
			return err
		}
		if rs.Python == nil {
			return fmt.Errorf("plugin %s starts a server with %s, and no managed Python runtime was found (looked for %s)", b.plugin, b.launch[0].call.launcher, strings.Join(installed.Candidates("python"), ", "))
		}
	}
	if b.packageCode {
		return b.pip(builds, proj, hasReqs)
	}
	if builds {
		what := "setup.py"
		if proj.buildSystem {
			be := proj.backend
			if be == "" {
				be = "setuptools (the default)"
			}
			what = "pyproject.toml build backend " + be
		}
		return b.refuse("plugin %s is a Python package whose %s would have to run to install it", b.plugin, what)
	}
	var reqs []requirement
	for _, dep := range proj.deps {
		r, err := parseRequirement(dep, "pyproject.toml")
		if err != nil {
			return b.refuse("%v", err)
		}
		reqs = append(reqs, r)
	}
	if hasReqs {
		rs, err := b.requirementsTxt()
		if err != nil {
			return err
		}
		reqs = append(reqs, rs...)
	}
	return b.unpackWheels(append(reqs, b.pyLaunch...))
}

func (b *builder) requirementsTxt() ([]requirement, error) {
	raw, err := b.readPluginFile("requirements.txt")
	if err != nil {
		return nil, fmt.Errorf("read requirements.txt: %w", err)
	}
	var out []requirement
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if i := strings.Index(l, "--hash"); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l), "\\"))
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "-") {
			return nil, b.refuse("requirements.txt line %d: %q: options (other files, editable installs, indexes) are not read in strict builds", n, l)
		}
		r, err := parseRequirement(l, fmt.Sprintf("requirements.txt line %d", n))
		if err != nil {
			return nil, b.refuse("%v", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// unpackWheels resolves reqs (and what their wheels require) against wheels/ and
// unpacks the chosen wheels into SitePackages. Unpacking a wheel is copying files
// out of a zip: no code of the package runs. A requirement whose marker excludes
// the managed Python or this OS is skipped.
func (b *builder) unpackWheels(reqs []requirement) error {
	if len(reqs) == 0 {
		return nil
	}
	py, err := b.targetPython()
	if err != nil {
		return err
	}
	tree, err := os.OpenRoot(b.tree)
	if err != nil {
		return fmt.Errorf("open plugin tree: %w", err)
	}
	defer tree.Close()
	var avail []wheel
	files, _ := fs.Glob(tree.FS(), "wheels/*.whl")
	for _, f := range files {
		if fi, err := tree.Lstat(f); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if w, ok := parseWheelName(f); ok {
			w.inTree = true
			avail = append(avail, w)
		}
	}
	chosen := map[string]wheel{}
	var order []string
	for len(reqs) > 0 {
		r := reqs[0]
		reqs = reqs[1:]
		if !r.appliesTo(py) {
			continue
		}
		if w, ok := chosen[r.name]; ok {
			for _, sp := range r.specs {
				if !versionSatisfies(w.version, sp) {
					return b.refuse("python dependency %s: %s needs %s, but the wheel chosen is %s", r.name, r.by, sp, filepath.Base(w.file))
				}
			}
			continue
		}
		var best *wheel
		seen := 0
		for i, w := range avail {
			if w.name != r.name {
				continue
			}
			seen++
			if !w.compatible(py) {
				continue
			}
			ok := true
			for _, sp := range r.specs {
				ok = ok && versionSatisfies(w.version, sp)
			}
			if ok && (best == nil || cmpRelease(releaseOf(w.version), releaseOf(best.version)) > 0) {
				best = &avail[i]
			}
		}
		if best == nil && b.pythonIndex != "" {
			w, ok, err := indexWheel(b.ctx, b.pythonIndex, r, py, filepath.Join(b.staging, "index-wheels"))
			if err != nil {
				return err
			}
			if ok {
				avail = append(avail, w)
				best = &avail[len(avail)-1]
				b.step("python: downloaded %s from %s", filepath.Base(w.file), b.pythonIndex)
			}
		}
		if best == nil {
			why := "no wheel for it in wheels/"
			if b.pythonIndex != "" {
				why += " or on " + b.pythonIndex
			}
			if seen > 0 {
				why = fmt.Sprintf("none of the %d wheels for it in wheels/ fits %s on this node", seen, strings.Join(append([]string{"Python " + py}, r.specs...), ", "))
			}
			return b.refuse("python dependency %s (required by %s): %s; strict builds install wheels only, and building %s from source would run its build code", r.raw, r.by, why, r.name)
		}
		chosen[r.name] = *best
		order = append(order, r.name)
		deps, err := wheelRequires(tree, *best)
		if err != nil {
			return err
		}
		for _, dep := range deps {
			dr, err := parseRequirement(dep, filepath.Base(best.file))
			if err != nil {
				return b.refuse("%v", err)
			}
			reqs = append(reqs, dr)
		}
	}
	sort.Strings(order)
	b.wheels = chosen
	budget := int64(MaxTotalBytes)
	for _, n := range order {
		w := chosen[n]
		if err := unpackWheel(tree, w, &budget); err != nil {
			return err
		}
		b.step("python: unpacked %s", filepath.Base(w.file))
	}
	return nil
}

// openWheel opens a wheel: one of the plugin's own beneath the plugin tree (never
// through a link leaving it), one from the index where it was downloaded.
func openWheel(tree *os.Root, w wheel) (*zip.Reader, io.Closer, error) {
	var f *os.File
	var err error
	if w.inTree {
		f, err = tree.Open(w.file)
	} else {
		f, err = os.Open(w.file)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	var zr *zip.Reader
	if err == nil {
		zr, err = zip.NewReader(f, fi.Size())
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
	}
	return zr, f, nil
}

// wheelRequires reads Requires-Dist from a wheel's METADATA.
func wheelRequires(tree *os.Root, w wheel) ([]string, error) {
	zr, c, err := openWheel(tree, w)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, f := range zr.File {
		if path.Base(f.Name) != "METADATA" || !strings.HasSuffix(path.Dir(f.Name), ".dist-info") || strings.Count(f.Name, "/") != 1 {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("wheel %s: %w", filepath.Base(w.file), err)
		}
		defer rc.Close()
		var out []string
		sc := bufio.NewScanner(io.LimitReader(rc, 4<<20))
		for sc.Scan() {
			l := sc.Text()
			if l == "" {
				break // the headers end; the description follows
			}
			if v, ok := strings.CutPrefix(l, "Requires-Dist:"); ok {
				out = append(out, strings.TrimSpace(v))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("wheel %s: no .dist-info/METADATA", filepath.Base(w.file))
}

// unpackWheel copies a wheel's files into SitePackages (and its scripts next to
// it), refusing paths that leave the folder, links and sizes beyond the budget.
// Every folder and file is created beneath the plugin tree (tree), never through a
// link: .oz0 must be a real folder of the tree.
func unpackWheel(tree *os.Root, w wheel, budget *int64) error {
	name := filepath.Base(w.file)
	zr, c, err := openWheel(tree, w)
	if err != nil {
		return err
	}
	defer c.Close()
	oz0 := path.Dir(installed.SitePackages)
	if fi, err := tree.Lstat(oz0); err == nil && !fi.IsDir() {
		return fmt.Errorf("wheel %s: %s is not a folder (a symlink?); the build writes only into a real %s of the plugin", name, oz0, oz0)
	}
	if err := tree.MkdirAll(installed.SitePackages, 0o755); err != nil {
		return fmt.Errorf("wheel %s: create %s: %w", name, installed.SitePackages, err)
	}
	root, err := tree.OpenRoot(oz0)
	if err != nil {
		return fmt.Errorf("wheel %s: open %s: %w", name, oz0, err)
	}
	defer root.Close()
	site := filepath.Base(installed.SitePackages)
	dataPrefix := w.dist + "-" + w.version + ".data/"
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		if err := checkRelPath(f.Name); err != nil {
			return fmt.Errorf("wheel %s: %w", name, err)
		}
		if !f.Mode().IsRegular() && f.Mode().Type() != 0 {
			return fmt.Errorf("wheel %s: %s is not a regular file", name, f.Name)
		}
		dst := path.Join(site, f.Name)
		if rest, ok := strings.CutPrefix(f.Name, dataPrefix); ok {
			kind, sub, _ := strings.Cut(rest, "/")
			switch kind {
			case "purelib", "platlib":
				dst = path.Join(site, sub)
			case "scripts":
				dst = path.Join("bin", sub)
			default:
				dst = path.Join("data", rest)
			}
		}
		if int64(f.UncompressedSize64) > *budget {
			return fmt.Errorf("wheel %s: unpacked files exceed %d bytes", name, MaxTotalBytes)
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("wheel %s: %s: %w", name, f.Name, err)
		}
		mode := os.FileMode(0o644)
		if f.Mode()&0o100 != 0 {
			mode = 0o755
		}
		lr := &io.LimitedReader{R: rc, N: *budget + 1}
		err = writeFile(root, dst, lr, mode)
		rc.Close()
		if err != nil {
			return fmt.Errorf("wheel %s: %w", name, err)
		}
		*budget = lr.N - 1
		if *budget < 0 {
			return fmt.Errorf("wheel %s: unpacked files exceed %d bytes", name, MaxTotalBytes)
		}
	}
	return nil
}

// pip builds with package code allowed (an exemption, auto, off or tier 0): the
// managed Python's pip installs the dependencies, and the plugin itself when it is a
// package, into SitePackages, running build backends as the node's user.
func (b *builder) pip(builds bool, proj pyProject, hasReqs bool) error {
	rs, err := installed.LoadRuntimes(b.d)
	if err != nil {
		return err
	}
	if rs.Python == nil {
		return fmt.Errorf("plugin %s needs Python to build, and no managed Python runtime was found (looked for %s)", b.plugin, strings.Join(installed.Candidates("python"), ", "))
	}
	argv := []string{rs.Python.Path, "-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
		"--no-warn-script-location", "--target", filepath.Join(b.tree, filepath.FromSlash(installed.SitePackages))}
	switch {
	case b.pythonIndex != "":
		argv = append(argv, "--index-url", b.pythonIndex)
		if b.exists("wheels") {
			argv = append(argv, "--find-links", filepath.Join(b.tree, "wheels"))
		}
	case b.exists("wheels"):
		argv = append(argv, "--no-index", "--find-links", filepath.Join(b.tree, "wheels"))
	}
	if hasReqs {
		argv = append(argv, "-r", "requirements.txt")
	}
	if builds {
		argv = append(argv, ".")
	} else {
		argv = append(argv, proj.deps...)
	}
	for _, r := range b.pyLaunch {
		argv = append(argv, r.raw)
	}
	env := b.toolEnv(filepath.Dir(rs.Python.Path), "PIP_CACHE_DIR="+filepath.Join(b.staging, "pip-cache"), "PYTHONNOUSERSITE=1")
	if err := b.exec(env, argv...); err != nil {
		return fmt.Errorf("python build (package code allowed, as the node's user): %w", err)
	}
	b.step("python: pip install into %s (package code ran as the node's user)", installed.SitePackages)
	return nil
}
