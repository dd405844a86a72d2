package install

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
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

// python applies the Python build rules.
func (b *builder) python() error {
	var proj pyProject
	if b.skipPython {
		// Launcher packages (uvx, pipx run) are still resolved below.
		var found []string
		for _, f := range []string{"pyproject.toml", "setup.py", "requirements.txt"} {
			if b.exists(f) {
				found = append(found, f)
			}
		}
		if len(found) > 0 {
			b.skipped(strings.Join(found, ", "), "Python")
		}
	}
	hasProj := !b.skipPython && b.exists("pyproject.toml")
	if hasProj {
		raw, err := b.readPluginFile("pyproject.toml")
		if err != nil {
			return fmt.Errorf("read pyproject.toml: %w", err)
		}
		if proj, err = parsePyproject(raw); err != nil {
			return err
		}
	}
	hasSetup := !b.skipPython && b.exists("setup.py")
	hasReqs := !b.skipPython && b.exists("requirements.txt")
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
			} else {
				// A new user's usual case: the wheels are on an index nobody named.
				why += ", and no Python package index was given (plugin install --python-index URL, a PEP 503 simple index: the public one or a mirror, takes wheels from it)"
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
