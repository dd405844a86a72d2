package install

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// pendingLaunch is a launcher server found in the manifest, to resolve in the build.
type pendingLaunch struct {
	server string
	call   launcherCall
}

// planLaunchers finds the servers of m started through a launcher. It refuses a
// plugin that ships LaunchDir itself (the node installs the packages there) and a
// launcher line that cannot be resolved at install.
func (b *builder) planLaunchers(m *manifest.Manifest) error {
	for _, s := range m.Servers {
		if s.Remote != nil {
			continue
		}
		c, ok, err := parseLauncher(s.Command, s.Args)
		if !ok {
			continue
		}
		if err != nil {
			// Resolved at install, a launcher's package is pinned and built under the
			// build rules; one the node cannot resolve (a git source, an option it
			// does not know) could run only as published, fetching at every start.
			if !b.packageCode {
				return b.refuse("server %s starts through a launcher the node resolves at install: %v; a launcher the node cannot resolve runs only as published (fetching its package at every start, unpinned, with the egress that needs)", s.Name, err)
			}
			n := fmt.Sprintf("server %s is not resolved at install (%v): it runs as published, its launcher fetching the package at every start, unpinned — it has the network for that only where the node runs the plugin exempt", s.Name, err)
			b.notes = append(b.notes, n)
			b.log.Warn("launcher not resolved", "plugin", b.plugin, "why", n)
			continue
		}
		for _, o := range b.launch {
			// One folder per server, also where names differ only in case.
			if strings.EqualFold(o.server, s.Name) {
				return fmt.Errorf("servers %s and %s both start through a launcher and differ only in case; rename one", o.server, s.Name)
			}
		}
		b.launch = append(b.launch, pendingLaunch{server: s.Name, call: c})
		if c.launcher == "uvx" || c.launcher == "pipx" {
			r, _ := parseRequirement(c.asked, "server "+s.Name+"'s "+c.launcher)
			py, err := b.targetPython()
			if err != nil {
				return err
			}
			if !r.appliesTo(py) {
				return fmt.Errorf("server %s starts through a launcher the node resolves at install: %s %s: package %q does not apply on this node (environment marker)", s.Name, c.launcher, strings.Join(s.Args, " "), c.asked)
			}
			if c.python != "" {
				// uvx would fetch an interpreter; the node runs the managed one.
				holds, known := pythonVersionHolds(c.python, py)
				switch {
				case !known:
					return fmt.Errorf("server %s asks %s for Python %q (--python), which the node cannot match to its managed Python %s; the node runs launcher packages with that one and fetches no interpreter", s.Name, c.launcher, c.python, py)
				case !holds:
					return fmt.Errorf("server %s asks %s for Python %s (--python %s); the node runs launcher packages with its managed Python, %s here, and fetches no interpreter: install a Python %s as %s", s.Name, c.launcher, c.python, c.python, py, c.python, strings.Join(installed.Candidates("python"), " or "))
				}
			}
			b.pyLaunch = append(b.pyLaunch, r)
		}
	}
	if len(b.launch) > 0 && b.exists(installed.LaunchDir) {
		return fmt.Errorf("the plugin ships %s, the folder the node installs launcher packages into", installed.LaunchDir)
	}
	return nil
}

// resolveLaunchers installs each launcher server's package under the build rules
// and records what it resolved.
func (b *builder) resolveLaunchers() error {
	for _, pl := range b.launch {
		var l *installed.Launch
		var err error
		switch pl.call.launcher {
		case "npx", "bunx":
			l, err = b.launchNPM(pl.server, pl.call)
		default:
			l, err = b.launchPython(pl.server, pl.call)
		}
		if err != nil {
			return fmt.Errorf("server %s (%s %s): %w", pl.server, pl.call.launcher, pl.call.asked, err)
		}
		b.launched = append(b.launched, *l)
		b.step("launcher: %s", l)
	}
	return nil
}

func (b *builder) launchNPM(server string, c launcherCall) (*installed.Launch, error) {
	rs, err := installed.LoadRuntimes(b.d)
	if err != nil {
		return nil, err
	}
	rt := "node"
	if c.launcher == "bunx" {
		rt = "bun"
		if rs.Bun == nil {
			return nil, fmt.Errorf("bunx needs the Bun runtime, and no managed Bun runtime was found (looked for %s); install Bun there or start the server with npx", strings.Join(installed.Candidates("bun"), ", "))
		}
	}
	rel := path.Join(installed.LaunchDir, server)
	tree, err := os.OpenRoot(b.tree)
	if err != nil {
		return nil, fmt.Errorf("open plugin tree: %w", err)
	}
	defer tree.Close()
	if err := tree.MkdirAll(rel, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", rel, err)
	}
	spec := c.spec
	if spec == "" {
		spec = "latest"
	}
	pj, _ := json.Marshal(map[string]any{
		"name": "oz0-launch-" + strings.ToLower(server), "version": "0.0.0", "private": true,
		"dependencies": map[string]string{c.pkg: spec},
	})
	if err := tree.WriteFile(path.Join(rel, "package.json"), pj, 0o644); err != nil {
		return nil, fmt.Errorf("write %s/package.json: %w", rel, err)
	}
	if err := b.npmBuild(rel, &c); err != nil {
		return nil, err
	}
	raw, err := b.readPluginFile(path.Join(rel, "package-lock.json"))
	if err != nil {
		return nil, fmt.Errorf("read the resolved lockfile: %w", err)
	}
	var lk npmLock
	if err := json.Unmarshal(raw, &lk); err != nil {
		return nil, fmt.Errorf("%s/package-lock.json: %w", rel, err)
	}
	got, ok := lk.Packages["node_modules/"+c.pkg]
	if !ok || got.Version == "" {
		return nil, fmt.Errorf("npm did not install %s", c.pkg)
	}
	pkgDir := path.Join(rel, "node_modules", c.pkg)
	cmd, bin, err := b.npmBin(pkgDir, c)
	if err != nil {
		return nil, err
	}
	return &installed.Launch{
		Server: server, Launcher: c.launcher, Asked: c.asked, Package: c.pkg, Version: got.Version,
		Integrity: got.Integrity, Runtime: rt, Entry: bin, Command: cmd, Skip: c.skip,
	}, nil
}

// npmBin picks the bin a launcher runs, as npx does: the one named with
// --package, else the package's only bin, else the one named like the package.
// The script must be a regular file inside the package's folder.
func (b *builder) npmBin(pkgDir string, c launcherCall) (name, entry string, err error) {
	raw, err := b.readPluginFile(path.Join(pkgDir, "package.json"))
	if err != nil {
		return "", "", fmt.Errorf("read %s's package.json: %w", c.pkg, err)
	}
	var pj struct {
		Bin json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(raw, &pj); err != nil {
		return "", "", fmt.Errorf("%s's package.json: %w", c.pkg, err)
	}
	bins := map[string]string{}
	unscoped := c.pkg[strings.LastIndex(c.pkg, "/")+1:]
	var one string
	if json.Unmarshal(pj.Bin, &one) == nil && one != "" {
		bins[unscoped] = one
	} else if err := json.Unmarshal(pj.Bin, &bins); err != nil || len(bins) == 0 {
		return "", "", fmt.Errorf("package %s has no bin to run", c.pkg)
	}
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	switch {
	case c.command != "":
		name = c.command
	case len(bins) == 1:
		name = names[0]
	default:
		name = unscoped
	}
	script, ok := bins[name]
	if !ok {
		return "", "", fmt.Errorf("package %s has no bin %q (it has %s)", c.pkg, name, strings.Join(names, ", "))
	}
	entry = path.Join(pkgDir, script)
	if !strings.HasPrefix(entry, pkgDir+"/") {
		return "", "", fmt.Errorf("package %s: bin %s (%s) lies outside the package", c.pkg, name, script)
	}
	tree, err := os.OpenRoot(b.tree)
	if err != nil {
		return "", "", err
	}
	defer tree.Close()
	if fi, err := tree.Lstat(entry); err != nil || !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("package %s: bin %s (%s) is not a file of the package", c.pkg, name, script)
	}
	return name, entry, nil
}

var entryPointRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// launchPython finds, among the packages the Python build put into SitePackages,
// the launcher's package and its console script.
func (b *builder) launchPython(server string, c launcherCall) (*installed.Launch, error) {
	tree, err := os.OpenRoot(b.tree)
	if err != nil {
		return nil, fmt.Errorf("open plugin tree: %w", err)
	}
	defer tree.Close()
	infos, _ := fs.Glob(tree.FS(), installed.SitePackages+"/*.dist-info")
	info, version := "", ""
	for _, d := range infos {
		base := strings.TrimSuffix(path.Base(d), ".dist-info")
		n, v, ok := strings.Cut(base, "-")
		if ok && normName(n) == c.pkg {
			info, version = d, v
			break
		}
	}
	if info == "" {
		return nil, fmt.Errorf("python package %s was not installed", c.pkg)
	}
	f, err := tree.Open(path.Join(info, "entry_points.txt"))
	if err != nil {
		return nil, fmt.Errorf("python package %s has no console scripts: %w", c.pkg, err)
	}
	defer f.Close()
	entry, section := "", ""
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "[") {
			section = strings.Trim(l, "[] ")
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && section == "console_scripts" && strings.TrimSpace(k) == c.command {
			entry = strings.TrimSpace(v)
			if i := strings.Index(entry, "["); i >= 0 {
				entry = strings.TrimSpace(entry[:i]) // extras do not change what runs
			}
		}
	}
	if entry == "" {
		return nil, fmt.Errorf("python package %s has no console script %q", c.pkg, c.command)
	}
	if !entryPointRE.MatchString(entry) {
		return nil, fmt.Errorf("python package %s: console script %s names %q, not module:attribute", c.pkg, c.command, entry)
	}
	l := &installed.Launch{
		Server: server, Launcher: c.launcher, Asked: c.asked, Package: c.pkg, Version: version,
		Runtime: "python", Entry: entry, Command: c.command, Skip: c.skip,
		Python: c.python, EnvFiles: c.envFiles,
	}
	if w, ok := b.wheels[c.pkg]; ok {
		if sum, err := fileSHA256(tree, w); err == nil {
			l.Integrity = "sha256-" + sum + " (" + path.Base(w.file) + ")"
		}
	}
	return l, nil
}

func fileSHA256(tree *os.Root, w wheel) (string, error) {
	var f io.ReadCloser
	var err error
	if w.inTree {
		f, err = tree.Open(w.file)
	} else {
		f, err = os.Open(w.file)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
