// Package install puts plugins on the node and takes them off: it fetches a
// repository at a commit (or a marketplace entry, or a plain folder), applies the
// build rules (Python wheels unpacked in Go, npm without scripts, launcher packages
// pinned; package code only where the policy allows it), places the files in the
// data folder and switches the active commit atomically, recording every change in
// the ledger. What is installed is read through package installed.
package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// Options say what to install and how the node builds it.
type Options struct {
	// Source is a git URL, a local git repository, a plain folder (a private
	// candidate), or NAME@MARKETPLACE for a Claude Code marketplace entry.
	Source string
	// Ref is the branch or tag to fetch (the remote's HEAD when empty).
	Ref string
	// Commit pins the commit (full or abbreviated); Ref must reach it.
	Commit string
	// Subdir is the plugin's folder inside the repository.
	Subdir string
	// Name, when set, must be the name the plugin's manifest declares.
	Name string
	// Private installs a private candidate: always sandboxed, never exempt, built
	// without package code.
	Private bool
	// By names who installs, for the ledger (the invoking user when empty).
	By string
	// Mode, Exemptions and Tier0 decide whether the build may run package code
	// (docs/promises.md §6). Mode defaults to strict. Tier0 says no sandbox backend works
	// here; when unsure leave it false: that is the stricter build.
	Mode       policy.Mode
	Exemptions []policy.Exemption
	Tier0      bool
	// PythonIndex is an operator-configured Python package index (a PEP 503
	// "simple" URL) that strict builds may take wheels from, besides the plugin's
	// own wheels/ folder (exempt builds hand it to pip).
	PythonIndex string
	// BuildSandbox is where strict builds run npm: nil where no
	// sandbox backend works (tier 0), and then npm runs as the node's user.
	BuildSandbox *BuildSandbox `json:"-"`
	// FirstParty allows the reserved ai.oz0 namespace.
	FirstParty bool
	// Submodules fetches the repository's git submodules at the commits its tree
	// pins (over http(s), through an egress proxy of the install's own); without
	// it they are left out, and the install says so.
	Submodules bool
	// AllowCIDRs are the ranges the operator opened past the egress address guard
	// (--egress-allow-cidr): they apply to everything an install fetches through
	// its egress proxy (the build's registry, submodules, bundles), e.g. a
	// registry mirror on a private network.
	AllowCIDRs []netip.Prefix
	// Reresolve installs again even when the commit is the active one, so that
	// what the build resolves (launcher packages at @latest or a range) moves
	// (`plugin update`).
	Reresolve bool
	Log       *slog.Logger

	// afterStep, when set, is called as the install passes each step (steps.go):
	// the kill tests stop a child there. Only this package's tests set it.
	afterStep func(step string)
}

// ErrBuildRefused marks an install refused by the build rules; the message names
// the dependency or build backend and the exemption that would allow it.
var ErrBuildRefused = errors.New("build refused")

// Install fetches, checks, builds and activates one plugin. It holds the plugins
// lock throughout; an install killed at any point leaves the previous installation
// active and only staging to clean. Installing the active commit again (same source,
// subdir and privacy) changes nothing and returns it with Unchanged set.
func Install(ctx context.Context, d datadir.Dir, o Options) (*installed.Plugin, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	o, err := o.checked()
	if err != nil {
		return nil, err
	}
	if err := d.Create(os.Geteuid() == 0); err != nil {
		return nil, err
	}
	l, err := acquire(ctx, d, o.Log)
	if err != nil {
		return nil, err
	}
	defer l.release()
	if err := cleanStagingLocked(d); err != nil {
		o.Log.Warn("leftovers of an earlier install could not be cleaned", "err", err)
	}
	st, err := newStaging(d)
	if err != nil {
		return nil, err
	}
	defer removeAll(st)

	j := &job{ctx: ctx, d: d, o: o, st: st}
	if err := j.fetch(); err != nil {
		return nil, err
	}
	if unchanged, err := j.admit(); unchanged != nil || err != nil {
		return unchanged, err
	}
	if err := j.build(); err != nil {
		return nil, err
	}
	if err := j.place(); err != nil {
		return nil, err
	}
	return j.activate()
}

// checked fills the defaults of o and refuses what is malformed in it before
// anything is fetched.
func (o Options) checked() (Options, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Mode == "" {
		o.Mode = policy.Strict
	}
	if _, err := policy.ParseMode(string(o.Mode)); err != nil {
		return o, err
	}
	if o.Commit != "" {
		o.Commit = strings.ToLower(o.Commit)
		if !installed.ValidCommit(o.Commit) {
			return o, fmt.Errorf("--commit %q: not a commit (7 to 64 hex digits)", o.Commit)
		}
	}
	if o.Name != "" && !manifest.ValidName(o.Name) {
		return o, fmt.Errorf("--name %q: not a plugin name (kebab-case)", o.Name)
	}
	subdir, err := checkSubdir(o.Subdir)
	if err != nil {
		return o, err
	}
	o.Subdir = subdir
	if o.Ref != "" {
		if err := checkRef(o.Ref); err != nil {
			return o, err
		}
	}
	return o, nil
}

// job is one install under the plugins lock, phase by phase: fetch, admit, build,
// place, activate. Each phase fills the fields the next one reads.
type job struct {
	ctx context.Context
	d   datadir.Dir
	o   Options
	st  string // this install's staging folder

	f    *fetched           // fetch: the plugin's files in staging
	m    *manifest.Manifest // admit: its manifest
	cur  *installed.Plugin  // admit: the active installation, if any
	same bool               // admit: cur is this very install (rebuilt on Reresolve)
	tier int                // build: 0 where no sandbox backend works
	dec  policy.Decision    // build: what the policy allows the build
	b    *builder           // build: what the build did
	dst  string             // place: plugins/<name>/<commit>
}

// fetch writes the plugin's files into staging (from a marketplace entry, a
// repository or a folder) and checks, as links resolve, that
// nothing in them leads outside the plugin: from here on the build and the
// manifest reader only ever meet links that stay inside.
func (j *job) fetch() error {
	if err := makeFetchDirs(j.st); err != nil {
		return err
	}
	var f *fetched
	var err error
	if plugin, mk, ok := splitMarketplace(j.o.Source); ok {
		f, err = fetchMarketplace(j.ctx, j.st, plugin, mk, j.o, j.o.Log)
	} else {
		f, err = fetchSource(j.ctx, j.st, j.o, j.o.Log)
	}
	if err != nil {
		return err
	}
	if err := checkInside(f.tree); err != nil {
		return fmt.Errorf("plugin at %s@%s: %w", f.source, short(f.commit), err)
	}
	j.f = f
	reached(j.o.afterStep, stepStaged)
	return nil
}

// admit reads the manifest and decides whether this plugin may be installed
// under its name. The active commit installed again the same way is returned,
// unchanged, unless the options ask to resolve it again.
func (j *job) admit() (unchanged *installed.Plugin, err error) {
	f, o, log := j.f, j.o, j.o.Log
	m, err := manifest.Load(f.tree, manifest.Options{FirstParty: o.FirstParty})
	if err != nil {
		return nil, fmt.Errorf("plugin at %s@%s: invalid manifest: %w", f.source, short(f.commit), err)
	}
	if o.Name != "" && o.Name != m.Name {
		return nil, fmt.Errorf("--name %s: the plugin's manifest names it %s (a plugin is installed under its manifest's name)", o.Name, m.Name)
	}
	cur, err := installed.Lookup(j.d, m.Name)
	if err != nil && !errors.Is(err, installed.ErrNotInstalled) {
		log.Warn("the active installation cannot be read; installing over it", "plugin", m.Name, "err", err)
		cur = nil
	}
	j.m, j.cur = m, cur
	j.same = cur != nil && cur.Commit == f.commit && cur.Private == f.private && cur.Subdir == f.subdir && cur.Source == f.source
	if j.same && !o.Reresolve {
		log.Info("already installed at this commit; nothing to do", "plugin", m.Name, "commit", f.commit)
		cur.Unchanged = true
		return cur, nil
	}
	return nil, checkCollision(j.d, m.Name)
}

// build asks the policy whether the build may run package code, applies the
// build rules in staging, and checks and syncs what the build wrote.
func (j *job) build() error {
	f, o, name := j.f, j.o, j.m.Name
	j.tier = 1
	if o.Tier0 {
		j.tier = 0
	}
	j.dec = policy.Decide(policy.Inputs{
		Manifest: j.m, Commit: f.commit, Mode: o.Mode, OS: runtime.GOOS, Tier: j.tier,
		Exemptions: o.Exemptions, Private: f.private, Root: os.Geteuid() == 0,
		DataDirTraversable: true,
	})
	j.b = &builder{
		ctx: j.ctx, log: o.Log, d: j.d, tree: f.tree, staging: j.st, plugin: name, commit: f.commit,
		packageCode: j.dec.Build.PackageCode, private: f.private, pythonIndex: o.PythonIndex,
		allowCIDRs: o.AllowCIDRs,
	}
	if !o.Tier0 {
		j.b.box = o.BuildSandbox
	}
	if len(j.m.Bundles) > 0 {
		// The bundles first: their servers are the plugin's, and what the rest of
		// the build resolves (a launcher an MCPB server starts with) depends on them.
		pins := map[string]string{}
		if j.cur != nil {
			for _, bd := range j.cur.Bundles {
				pins[bd.Source] = bd.SHA256
			}
		}
		if err := j.b.bundles(j.m, pins, o.Reresolve); err != nil {
			return fmt.Errorf("plugin %s@%s: %w", name, short(f.commit), err)
		}
		m, err := manifest.Load(f.tree, manifest.Options{FirstParty: o.FirstParty})
		if err != nil {
			return fmt.Errorf("plugin %s@%s: with its MCPB bundles unpacked: invalid manifest: %w", name, short(f.commit), err)
		}
		j.m = m
	}
	if err := j.b.run(j.m); err != nil {
		return fmt.Errorf("plugin %s@%s: %w", name, short(f.commit), err)
	}
	// A runtime the node lacks is said now; the server is held back at every
	// decision until it is installed (docs/plugin-format.md "Runtimes").
	for _, n := range missingRuntimes(j.m, runtime.GOOS, j.b.launches) {
		o.Log.Warn(n, "plugin", name)
		j.b.notes = append(j.b.notes, n)
	}
	reached(o.afterStep, stepBuilt)
	if err := checkBuilt(f.tree); err != nil {
		return fmt.Errorf("plugin %s@%s: %w", name, short(f.commit), err)
	}
	return syncTree(f.tree)
}

// place publishes the built files at plugins/<name>/<commit>: one rename of a
// complete, fsynced folder (an exchange when the active commit is rebuilt).
func (j *job) place() error {
	f, name, cur := j.f, j.m.Name, j.cur
	if err := os.MkdirAll(j.d.Plugin(name), 0o700); err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	dst := j.d.PluginCommit(name, f.commit)
	switch _, err := os.Lstat(dst); {
	case j.same:
		// The active commit built again (`plugin update`): its folder is exchanged
		// for the new build in one step, so `current` never points at a missing
		// or half-written folder; the old build leaves with staging.
		if err := exchangeDirs(f.tree, dst); err != nil {
			return fmt.Errorf("plugin %s: replace %s: %w", name, dst, err)
		}
	case err == nil && cur != nil && cur.Commit == f.commit:
		return fmt.Errorf("plugin %s@%s is active from %s (subdir %q, private %v); remove it first to install this commit from %s", name, short(f.commit), cur.Source, cur.Subdir, cur.Private, f.source)
	default:
		if err == nil {
			// An earlier copy of this commit, inactive: moved aside whole, so the
			// folder is never half one and half the other.
			if err := os.Rename(dst, filepath.Join(j.st, "old-"+f.commit)); err != nil {
				return fmt.Errorf("plugin %s: move aside %s: %w", name, dst, err)
			}
		}
		if err := os.Rename(f.tree, dst); err != nil {
			return fmt.Errorf("plugin %s: place files at %s: %w", name, dst, err)
		}
	}
	if err := datadir.SyncDir(j.d.Plugin(name)); err != nil {
		return err
	}
	j.dst = dst
	reached(j.o.afterStep, stepPlaced)
	return nil
}

// activate writes the install record and switches `current` to it, then records
// the install in the ledger and prunes commits older than the one before.
func (j *job) activate() (*installed.Plugin, error) {
	f, o, name, b, dec := j.f, j.o, j.m.Name, j.b, j.dec
	buildDesc := dec.Build.Reason
	if len(b.steps) > 0 {
		buildDesc += "; " + strings.Join(b.steps, "; ")
	}
	var subs []installed.Submodule
	var notes []string
	if f.x != nil {
		subs, notes = f.x.submodules, f.x.notes
	}
	notes = append(notes, b.notes...)
	meta := installed.Meta{
		Name: name, Commit: f.commit, Source: f.source, Ref: f.ref, Subdir: f.subdir,
		Private: f.private, FirstParty: o.FirstParty, InstalledBy: installed.Who(o.By),
		InstalledAt: time.Now().UTC(), Mode: string(o.Mode), Build: buildDesc,
		Launchers: b.launched, Submodules: subs, Bundles: b.bundled, Notes: notes,
	}
	entry := installed.LedgerEntry{
		Time: meta.InstalledAt, Action: installed.ActionInstall, Plugin: name, Who: meta.InstalledBy,
		Source: f.source, Marketplace: f.marketplace, Ref: f.ref, Commit: f.commit, Subdir: f.subdir,
		Private: f.private, Mode: string(o.Mode), Tier: j.tier,
		Build:      &installed.Build{PackageCode: dec.Build.PackageCode, Reason: dec.Build.Reason, Steps: b.steps, Launchers: b.launched},
		Submodules: subs, Bundles: b.bundled, Notes: notes,
	}
	keep := ""
	if j.cur != nil {
		entry.Action, entry.Previous = installed.ActionUpdate, j.cur.Commit
		keep = j.cur.Commit
	}
	// Written ahead: a kill from here on leaves a line the next start closes.
	if err := writeIntent(j.d, &entry); err != nil {
		return nil, err
	}
	reached(o.afterStep, stepIntent)
	if err := installed.Activate(j.d, meta); err != nil {
		return nil, err
	}
	reached(o.afterStep, stepActivated)
	if err := installed.AppendLedger(j.d, entry); err != nil {
		return nil, fmt.Errorf("plugin %s@%s is installed but %w", name, short(f.commit), err)
	}
	prune(j.d, name, f.commit, keep, j.st, o.Log)
	o.Log.Info("plugin installed", "plugin", name, "commit", f.commit, "source", f.source, "private", f.private, "build", buildDesc)
	return &installed.Plugin{Meta: meta, Dir: j.dst}, nil
}

// checkCollision refuses a plugin whose per-plugin uid another installed plugin
// already has: users are never shared (docs/promises.md §8).
func checkCollision(d datadir.Dir, name string) error {
	all, _ := installed.List(d)
	uid := policy.PluginUID(name)
	for _, in := range all {
		if in.Name != name && policy.PluginUID(in.Name) == uid {
			return fmt.Errorf("plugin %s hashes to uid %d, which installed plugin %s already has; per-plugin users are never shared, so %s is refused (rename one of them in its manifest)", name, uid, in.Name, name)
		}
	}
	return nil
}

// prune moves commit folders other than the active one and the one before it out
// of the plugin's folder (one rename each) and removes them with staging.
func prune(d datadir.Dir, name, active, previous, st string, log *slog.Logger) {
	ents, err := os.ReadDir(d.Plugin(name))
	if err != nil {
		return
	}
	for _, e := range ents {
		c := strings.TrimSuffix(e.Name(), ".json")
		if !installed.ValidCommit(c) || c == active || c == previous {
			continue
		}
		p := filepath.Join(d.Plugin(name), e.Name())
		if err := os.Rename(p, filepath.Join(st, "prune-"+e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("could not remove an old commit", "plugin", name, "path", p, "err", err)
		}
	}
}
