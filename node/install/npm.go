package install

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/node/installed"
)

// npmSpecProblem says why a dependency spec would not come from the registry or
// from inside the plugin ("" when it does). dir is the folder of the package.json
// naming it, relative to the plugin root.
func npmSpecProblem(dir, spec string) string {
	s := strings.TrimSpace(spec)
	if alias, ok := strings.CutPrefix(s, "npm:"); ok {
		// npm:name@range: a registry package's name, and a range that must itself
		// be a registry range. Without the range nothing says what is installed
		// (and the rest was never checked as a name).
		at := strings.LastIndex(alias, "@")
		if at <= 0 || strings.TrimSpace(alias[at+1:]) == "" {
			return "an npm: alias without a version (" + s + ")"
		}
		if !npmLegacyName(alias[:at]) {
			return "an npm: alias of no registry package (" + s + ")"
		}
		return npmSpecProblem(dir, alias[at+1:])
	}
	low := strings.ToLower(s)
	for _, p := range []string{"git+", "git:", "git@", "github:", "gitlab:", "bitbucket:", "gist:"} {
		if strings.HasPrefix(low, p) {
			return "a git dependency (" + s + ")"
		}
	}
	if strings.HasPrefix(low, "http://") || strings.HasPrefix(low, "https://") {
		return "a URL dependency (" + s + ")"
	}
	local := ""
	switch {
	case strings.HasPrefix(s, "file:"):
		local = strings.TrimPrefix(s, "file:")
	case strings.HasPrefix(s, "link:"):
		local = strings.TrimPrefix(s, "link:")
	case strings.HasPrefix(s, "./"), strings.HasPrefix(s, "../"), strings.HasPrefix(s, "/"), strings.HasPrefix(s, "~"), s == ".", s == "..":
		local = s
	case strings.Contains(s, "/") && !strings.HasPrefix(s, "@"):
		return "a GitHub dependency (" + s + ")"
	}
	if local != "" {
		if strings.HasPrefix(local, "/") || strings.HasPrefix(local, "~") {
			return "a local dependency outside the plugin folder (" + s + ")"
		}
		p := path.Clean(path.Join(dir, local))
		if p == ".." || strings.HasPrefix(p, "../") {
			return "a local dependency outside the plugin folder (" + s + ")"
		}
	}
	return ""
}

type packageJSON struct {
	Name     string            `json:"name"`
	Deps     map[string]string `json:"dependencies"`
	Optional map[string]string `json:"optionalDependencies"`
	Peer     map[string]string `json:"peerDependencies"`
}

// npmLock is the part of package-lock.json (v1 to v3) the check reads.
type npmLock struct {
	Packages map[string]struct {
		Version          string `json:"version"`
		Resolved         string `json:"resolved"`
		Integrity        string `json:"integrity"`
		Link             bool   `json:"link"`
		Dev              bool   `json:"dev"`
		HasInstallScript bool   `json:"hasInstallScript"`
	} `json:"packages"`
	Dependencies map[string]npmLockV1 `json:"dependencies"`
}

type npmLockV1 struct {
	Version      string               `json:"version"`
	Resolved     string               `json:"resolved"`
	Dev          bool                 `json:"dev"`
	Dependencies map[string]npmLockV1 `json:"dependencies"`
}

// checkNPM refuses, naming the dependency, anything npm would fetch from git, a URL
// or a path outside the plugin: in package.json and, when there is one, in every
// package of the lockfile. Dev dependencies are not installed and not checked.
// rel is the folder of package.json in the plugin ("" for its root).
func (b *builder) checkNPM(rel, lockFile string) error {
	raw, err := b.readPluginFile(path.Join(rel, "package.json"))
	if err != nil {
		return fmt.Errorf("read package.json: %w", err)
	}
	var pj packageJSON
	if err := json.Unmarshal(raw, &pj); err != nil {
		return fmt.Errorf("package.json: %w", err)
	}
	for _, set := range []map[string]string{pj.Deps, pj.Optional, pj.Peer} {
		names := make([]string, 0, len(set))
		for n := range set {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if p := npmSpecProblem(path.Join(".", rel), set[n]); p != "" {
				return b.refuse("npm dependency %s in package.json is %s, not from the registry or inside the plugin", n, p)
			}
		}
	}
	if lockFile == "" {
		return nil
	}
	lk, keys, err := b.readLock(lockFile)
	if err != nil {
		return err
	}
	for _, k := range keys {
		// Every key, dev ones too: npm places each package at its key.
		if prob := lockKeyProblem(k); prob != "" {
			return b.refuse("npm package %q in %s %s", k, lockFile, prob)
		}
	}
	for _, k := range keys {
		p := lk.Packages[k]
		if k == "" || p.Dev {
			continue
		}
		name := k
		if i := strings.LastIndex(k, "node_modules/"); i >= 0 {
			name = k[i+len("node_modules/"):]
		}
		if prob := b.reg.resolvedProblem(p.Resolved, p.Link); prob != "" {
			return b.refuse("npm dependency %s in %s is %s", name, lockFile, prob)
		}
	}
	var walk func(prefix string, deps map[string]npmLockV1) error
	walk = func(prefix string, deps map[string]npmLockV1) error {
		for n, d := range deps {
			if !npmLegacyName(n) {
				// npm places it at node_modules/<name>.
				return b.refuse("npm dependency %q in %s is no package name, so its folder would not be below node_modules/", prefix+n, lockFile)
			}
			if d.Dev {
				continue
			}
			if prob := npmSpecProblem(".", d.Version); prob != "" {
				return b.refuse("npm dependency %s%s in %s is %s", prefix, n, lockFile, prob)
			}
			if prob := b.reg.resolvedProblem(d.Resolved, false); prob != "" {
				return b.refuse("npm dependency %s%s in %s is %s", prefix, n, lockFile, prob)
			}
			if err := walk(prefix+n+" > ", d.Dependencies); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("", lk.Dependencies)
}

// lockKeyProblem says why a package key of a lockfile (v2, v3) would put a
// package anywhere but a folder of the plugin ("" when it would not): a key is
// a workspace folder inside the plugin, optionally followed by
// node_modules/NAME any number of times, each NAME a package name; npm puts the
// package at that path.
func lockKeyProblem(k string) string {
	switch {
	case k == "":
		return "" // the project itself
	case strings.Contains(k, `\`):
		return "has a backslash, a path separator on Windows: it could leave node_modules/"
	case strings.HasPrefix(k, "/"):
		return "is an absolute path, outside the plugin folder"
	case path.Clean(k) != k || k == "..", strings.HasPrefix(k, "../"):
		return "is not a plain path inside the plugin folder (a . or .. element, or an empty one): it could leave node_modules/"
	}
	parts := strings.Split(k, "/")
	i := slices.Index(parts, "node_modules")
	if i < 0 {
		return "" // a workspace folder
	}
	for i < len(parts) {
		if parts[i] != "node_modules" || i+1 == len(parts) {
			return "does not name a package below node_modules/ (node_modules/NAME, nested)"
		}
		name := parts[i+1]
		i += 2
		if strings.HasPrefix(name, "@") && i < len(parts) {
			name += "/" + parts[i]
			i++
		}
		if !npmLegacyName(name) {
			return fmt.Sprintf("does not name a package below node_modules/ (%q is no package name)", name)
		}
	}
	return ""
}

// resolvedProblem says why a lockfile's "resolved" would not come from the
// registry or from inside the plugin ("" when it does).
func (r *npmRegistry) resolvedProblem(resolved string, link bool) string {
	switch {
	case resolved == "":
		return ""
	case link || !strings.Contains(resolved, ":"):
		c := path.Clean(resolved)
		if c == ".." || strings.HasPrefix(c, "../") || strings.HasPrefix(c, "/") {
			return "a local package outside the plugin folder (" + resolved + ")"
		}
		return ""
	case strings.HasPrefix(resolved, "file:"):
		return npmSpecProblem(".", resolved)
	case r.accepts(resolved):
		return ""
	}
	if p := npmSpecProblem(".", resolved); p != "" {
		return p
	}
	return "not from the registry " + r.url + " (" + resolved + ")"
}

// npm applies the npm build rules to a plugin with a package.json.
func (b *builder) npm() error {
	if !b.exists("package.json") {
		return nil
	}
	if b.skipNode {
		b.skipped("package.json", "Node.js")
		return nil
	}
	return b.npmBuild("", nil)
}

// npmBuild builds the package.json in folder rel of the plugin ("" for its root).
// A launcher's package (launch set) is installed without bin links (nothing below
// .oz0 may be a link), and under strict it is refused when any package of its
// tree needs an install script to work.
func (b *builder) npmBuild(rel string, launch *launcherCall) error {
	lockFile := ""
	for _, f := range []string{"npm-shrinkwrap.json", "package-lock.json"} {
		if b.exists(path.Join(rel, f)) {
			lockFile = path.Join(rel, f)
			break
		}
	}
	rs, err := installed.LoadRuntimes(b.d)
	if err != nil {
		return err
	}
	if rs.Node == nil || rs.NPM == "" {
		what := "has a package.json"
		if launch != nil {
			what = "starts a server with " + launch.launcher
		}
		return fmt.Errorf("plugin %s %s, and no managed Node.js runtime with npm was found (looked for %s)", b.plugin, what, strings.Join(installed.Candidates("node"), ", "))
	}
	env := b.toolEnv(filepath.Dir(rs.Node.Path),
		"npm_config_cache="+filepath.Join(b.staging, "npm-cache"),
		"npm_config_userconfig="+filepath.Join(b.staging, "home", ".npmrc"),
		"npm_config_update_notifier=false",
	)
	common := []string{"--no-audit", "--no-fund", "--omit=dev"}
	// npm runs in the package.json's folder (so that is its project); --prefix
	// would also move its global config, and with it the operator's settings.
	b.workDir = rel
	defer func() { b.workDir = "" }()
	if launch != nil {
		common = append(common, "--no-bin-links")
	}

	reg, err := b.registry()
	if err != nil {
		return err
	}
	env = append(env, "npm_config_registry="+reg.url)
	if b.packageCode {
		argv := append([]string{rs.NPM, "install"}, common...)
		if lockFile != "" {
			argv[1] = "ci"
		}
		if err := b.exec(env, argv...); err != nil {
			return fmt.Errorf("npm build (package code allowed, as the node's user): %w", err)
		}
		b.step("npm: %s%s with lifecycle scripts (package code ran as the node's user)", argv[1], inFolder(rel))
		return nil
	}

	if err := b.checkNPM(rel, lockFile); err != nil {
		return err
	}
	// A project .npmrc can turn scripts back on or name another registry: it is set
	// aside while npm runs and put back after.
	restore, err := b.moveAside(".npmrc")
	if err != nil {
		return err
	}
	defer restore()
	env = append(env, "npm_config_ignore_scripts=true")
	// run runs npm in the build sandbox where there is one, else (tier 0, no
	// backend) as the node's user.
	where := "as the node's user (no build sandbox on this node)"
	run := func(argv ...string) error { return b.exec(env, argv...) }
	if b.box != nil && b.box.Backend != nil {
		b.nodePath, b.npmPath = rs.Node.Path, rs.NPM
		home := filepath.Join(b.staging, "build-home")
		boxEnv := []string{
			"npm_config_cache=" + filepath.Join(home, ".npm"),
			"npm_config_userconfig=" + filepath.Join(home, ".npmrc"),
			"npm_config_update_notifier=false",
			"npm_config_ignore_scripts=true",
			"npm_config_registry=" + reg.url,
		}
		run = func(argv ...string) error {
			w, err := b.sandboxed(argv, boxEnv)
			if err == nil {
				where = w
			}
			return err
		}
	}
	if lockFile == "" {
		// Resolve first, with nothing run and nothing installed, so the complete
		// dependency tree can be checked before anything is fetched into the plugin.
		if err := run(rs.NPM, "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"); err != nil {
			return fmt.Errorf("npm: resolve dependencies%s: %w", inFolder(rel), err)
		}
		lockFile = path.Join(rel, "package-lock.json")
		if err := b.checkNPM(rel, lockFile); err != nil {
			return err
		}
	}
	if launch != nil {
		// Refused before anything is fetched: the lockfile says which packages
		// have install scripts (or a native build).
		if err := b.checkNoInstallScripts(lockFile, launch); err != nil {
			return err
		}
	}
	argv := append([]string{rs.NPM, "ci", "--ignore-scripts"}, common...)
	if err := run(argv...); err != nil {
		return fmt.Errorf("npm build (scripts disabled): %w", err)
	}
	if err := restore(); err != nil {
		return err
	}
	b.step("npm: ci --ignore-scripts%s (no lifecycle script ran), %s", inFolder(rel), where)
	return nil
}

func inFolder(rel string) string {
	if rel == "" {
		return ""
	}
	return " in " + rel
}

// checkNoInstallScripts refuses, naming it, a package of a launcher's tree that
// needs an install script (preinstall, install, postinstall or a native build):
// with scripts off it would be installed broken.
func (b *builder) checkNoInstallScripts(lockFile string, launch *launcherCall) error {
	lk, keys, err := b.readLock(lockFile)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if p := lk.Packages[k]; k != "" && !p.Dev && p.HasInstallScript {
			name := k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):]
			via := ""
			if name != launch.pkg {
				via = " (a dependency of " + launch.pkg + ")"
			}
			return b.refuse("npm package %s@%s%s, which a server starts with %s, has an install script or a native build, and strict builds run no package code", name, p.Version, via, launch.launcher)
		}
	}
	return nil
}

// readLock reads a lockfile beneath the plugin tree and returns it with its
// package keys in a stable order.
func (b *builder) readLock(lockFile string) (npmLock, []string, error) {
	var lk npmLock
	raw, err := b.readPluginFile(lockFile)
	if err != nil {
		return lk, nil, fmt.Errorf("read %s: %w", lockFile, err)
	}
	if err := json.Unmarshal(raw, &lk); err != nil {
		return lk, nil, fmt.Errorf("%s: %w", lockFile, err)
	}
	keys := make([]string, 0, len(lk.Packages))
	for k := range lk.Packages {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return lk, keys, nil
}
