package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// MarketplaceFile is where a Claude Code marketplace lists its plugins.
const MarketplaceFile = ".claude-plugin/marketplace.json"

// splitMarketplace recognises NAME@MARKETPLACE: a plugin name, then a local path,
// a URL or a GitHub owner/repo. user@host:path git sources do not match (the part
// after @ is none of those).
func splitMarketplace(s string) (plugin, mk string, ok bool) {
	if _, err := os.Stat(s); err == nil {
		return "", "", false
	}
	plugin, mk, ok = strings.Cut(s, "@")
	if !ok || !manifest.ValidName(plugin) || mk == "" {
		return "", "", false
	}
	if _, err := os.Stat(strings.TrimPrefix(mk, "file://")); err == nil {
		return plugin, mk, true
	}
	if urlSchemeRE.MatchString(mk) || ghShortRE.MatchString(mk) {
		return plugin, mk, true
	}
	return "", "", false
}

// githubBase is where owner/repo shorthand points (tests point it at a git server
// on loopback).
var githubBase = "https://github.com/"

// githubURL is the git URL of a GitHub owner/repo.
func githubURL(repo string) string { return githubBase + repo + ".git" }

// marketplace is the part of marketplace.json the node reads.
type marketplace struct {
	Name     string `json:"name"`
	Metadata struct {
		PluginRoot string `json:"pluginRoot"`
	} `json:"metadata"`
	Plugins []json.RawMessage `json:"plugins"`
}

// mkEntry is one plugin entry. Besides where the plugin is, an entry may carry
// the plugin's manifest fields (components, servers, hooks…) itself.
type mkEntry struct {
	Name   string          `json:"name"`
	Source json.RawMessage `json:"source"`
	// Strict false: the entry is the plugin's whole manifest.
	Strict *bool `json:"strict"`
}

// mkSource is a marketplace entry's source, resolved.
type mkSource struct {
	relative string // a folder in the marketplace repository ("" for the others)
	url      string // a git repository
	path     string // a folder inside url's repository (git-subdir)
	ref, sha string
	// manifest is the entry as a plugin manifest (its marketplace-only keys
	// removed), used where the plugin's folder has none; strict is false when the
	// entry must be the only manifest.
	manifest map[string]any
	strict   bool
}

// marketplaceOnlyKeys are entry keys that describe the listing, not the plugin.
var marketplaceOnlyKeys = []string{"source", "strict", "category", "tags"}

func parseMarketplace(b []byte, plugin string) (mkSource, error) {
	var m marketplace
	if err := json.Unmarshal(b, &m); err != nil {
		return mkSource{}, fmt.Errorf("%s: invalid JSON: %w", MarketplaceFile, err)
	}
	var names []string
	for _, raw := range m.Plugins {
		var p mkEntry
		if err := json.Unmarshal(raw, &p); err != nil {
			return mkSource{}, fmt.Errorf("%s: a plugin entry is not an object: %w", MarketplaceFile, err)
		}
		names = append(names, p.Name)
		if p.Name != plugin {
			continue
		}
		s, err := parseEntrySource(m, p, plugin)
		if err != nil {
			return mkSource{}, err
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			return mkSource{}, fmt.Errorf("%s: plugin %s: %w", MarketplaceFile, plugin, err)
		}
		for _, k := range marketplaceOnlyKeys {
			delete(fields, k)
		}
		s.manifest, s.strict = fields, p.Strict == nil || *p.Strict
		return s, nil
	}
	return mkSource{}, fmt.Errorf("%s: no plugin named %s (it lists: %s)", MarketplaceFile, plugin, strings.Join(names, ", "))
}

// parseEntrySource resolves where an entry's plugin is.
func parseEntrySource(m marketplace, p mkEntry, plugin string) (mkSource, error) {
	{
		var rel string
		if err := json.Unmarshal(p.Source, &rel); err == nil {
			if !strings.HasPrefix(rel, "./") && !strings.HasPrefix(rel, "../") && m.Metadata.PluginRoot != "" {
				rel = path.Join(m.Metadata.PluginRoot, rel)
			}
			c := path.Clean(rel)
			if c != "." {
				if err := checkRelPath(c); err != nil {
					return mkSource{}, fmt.Errorf("%s: plugin %s: source %q must be a folder inside the marketplace: %w", MarketplaceFile, plugin, rel, err)
				}
			}
			return mkSource{relative: c}, nil
		}
		var o struct {
			Source string `json:"source"`
			Repo   string `json:"repo"`
			URL    string `json:"url"`
			Path   string `json:"path"`
			Ref    string `json:"ref"`
			SHA    string `json:"sha"`
		}
		if err := json.Unmarshal(p.Source, &o); err != nil {
			return mkSource{}, fmt.Errorf("%s: plugin %s: source must be a path or an object: %w", MarketplaceFile, plugin, err)
		}
		s := mkSource{ref: o.Ref, sha: strings.ToLower(o.SHA)}
		switch o.Source {
		case "github":
			if !ghShortRE.MatchString(o.Repo) {
				return mkSource{}, fmt.Errorf("%s: plugin %s: github repo %q must be owner/repo", MarketplaceFile, plugin, o.Repo)
			}
			s.url = githubURL(o.Repo)
		case "url":
			s.url = o.URL
		case "git-subdir":
			s.url, s.path = o.URL, o.Path
			if s.url == "" && o.Repo != "" {
				s.url = githubURL(o.Repo)
			}
		case "npm", "pip":
			return mkSource{}, fmt.Errorf("%s: plugin %s: source type %q is not supported: the node installs a plugin from a git repository at a commit, and a package of a registry is not one; install the plugin's repository instead", MarketplaceFile, plugin, o.Source)
		default:
			return mkSource{}, fmt.Errorf("%s: plugin %s: source type %q is not supported (relative folder, github, url or git-subdir)", MarketplaceFile, plugin, o.Source)
		}
		if s.url == "" {
			return mkSource{}, fmt.Errorf("%s: plugin %s: source %s has no url", MarketplaceFile, plugin, o.Source)
		}
		if s.sha != "" && !installed.ValidCommit(s.sha) {
			return mkSource{}, fmt.Errorf("%s: plugin %s: sha %q is not a commit", MarketplaceFile, plugin, o.SHA)
		}
		if s.ref != "" {
			if err := checkRef(s.ref); err != nil {
				return mkSource{}, fmt.Errorf("%s: plugin %s: %w", MarketplaceFile, plugin, err)
			}
		}
		return s, nil
	}
}

// fetchMarketplace fetches the marketplace repository (at --ref/--commit), finds
// the plugin's entry and fetches the plugin as the entry says.
func fetchMarketplace(ctx context.Context, st, plugin, mk string, o Options, log *slog.Logger) (*fetched, error) {
	if o.Subdir != "" {
		return nil, fmt.Errorf("--subdir cannot be used with a marketplace: its entry says where the plugin is")
	}
	if ghShortRE.MatchString(mk) {
		if _, err := os.Stat(mk); err != nil {
			mk = githubURL(mk)
		}
	}
	src, err := classify(mk)
	if err != nil {
		return nil, fmt.Errorf("marketplace: %w", err)
	}
	if src.kind == "folder" {
		return nil, fmt.Errorf("marketplace %s: not a git repository", src.shown)
	}
	home, tree := filepath.Join(st, "home"), filepath.Join(st, "tree")
	g := &git{home: home}
	if src.kind == "local" {
		g.local = src.target
	}
	repo := filepath.Join(st, "marketplace.git")
	mkCommit, err := g.fetch(ctx, repo, src.target, o.Ref, o.Commit)
	if err != nil {
		return nil, fmt.Errorf("marketplace: %w", err)
	}
	if t, err := g.run(ctx, repo, "cat-file", "-t", "--end-of-options", mkCommit+":"+MarketplaceFile); err != nil || t != "blob" {
		return nil, fmt.Errorf("marketplace %s@%s has no %s", src.shown, short(mkCommit), MarketplaceFile)
	}
	if n, err := g.run(ctx, repo, "cat-file", "-s", "--end-of-options", mkCommit+":"+MarketplaceFile); err != nil || len(n) > 7 {
		return nil, fmt.Errorf("marketplace %s: %s is too large", src.shown, MarketplaceFile)
	}
	raw, err := g.run(ctx, repo, "cat-file", "blob", "--end-of-options", mkCommit+":"+MarketplaceFile)
	if err != nil {
		return nil, fmt.Errorf("marketplace %s: read %s: %w", src.shown, MarketplaceFile, err)
	}
	ms, err := parseMarketplace([]byte(raw), plugin)
	if err != nil {
		return nil, fmt.Errorf("marketplace %s@%s: %w", src.shown, short(mkCommit), err)
	}
	f := &fetched{tree: tree, private: o.Private, marketplace: plugin + "@" + src.shown}
	target := "" // where the plugin's repository is fetched from
	if ms.url == "" {
		if err := noLinkOnTheWay(ctx, g, repo, mkCommit, ms.relative); err != nil {
			return nil, fmt.Errorf("marketplace %s: plugin %s: source ./%s: %w", src.shown, plugin, ms.relative, err)
		}
		// The plugin lives in the marketplace repository itself.
		f.source, f.ref, f.commit, target = src.shown, o.Ref, mkCommit, src.target
		if ms.relative != "." {
			f.subdir = ms.relative
		}
		log.Info("marketplace entry is a folder of the marketplace", "plugin", plugin, "folder", ms.relative)
	} else {
		psrc, err := entrySource(ms.url, src)
		if err != nil {
			return nil, fmt.Errorf("marketplace %s: plugin %s: %w", src.shown, plugin, err)
		}
		if psrc.kind == "folder" {
			return nil, fmt.Errorf("marketplace %s: plugin %s: %s is not a git repository", src.shown, plugin, psrc.shown)
		}
		g = &git{home: home}
		if psrc.kind == "local" {
			g.local = psrc.target
		}
		repo = filepath.Join(st, "repo.git")
		log.Info("marketplace entry names a repository", "plugin", plugin, "url", psrc.shown, "ref", ms.ref, "sha", ms.sha)
		if f.commit, err = g.fetch(ctx, repo, psrc.target, ms.ref, ms.sha); err != nil {
			return nil, fmt.Errorf("marketplace %s: plugin %s: %w", src.shown, plugin, err)
		}
		f.source, f.ref, target = psrc.shown, ms.ref, psrc.target
		if ms.path != "" {
			if f.subdir, err = checkSubdir(ms.path); err != nil {
				return nil, fmt.Errorf("marketplace %s: plugin %s: path: %w", src.shown, plugin, err)
			}
		}
	}
	reached(o.afterStep, stepFetched)
	so := o.subOpts(st, log)
	if so.base = target; g.local != "" {
		so.base = g.originURL(ctx, g.local)
	}
	if f.x, err = extract(ctx, g, repo, f.commit, f.subdir, tree, so); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", f.source, short(f.commit), err)
	}
	if err := entryManifest(tree, ms); err != nil {
		return nil, fmt.Errorf("marketplace %s: plugin %s: %w", src.shown, plugin, err)
	}
	return f, nil
}

// entryManifest gives a plugin whose folder has no manifest the one its
// marketplace entry carries (Claude Code reads the entry as the manifest then),
// written as .claude-plugin/plugin.json into the extracted tree, beneath it (a
// link in the tree cannot redirect the write). An entry with strict: false is the
// plugin's only manifest: a folder that has its own as well is refused, as Claude
// Code refuses it. The written manifest is then validated like any other.
func entryManifest(tree string, ms mkSource) error {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range []string{"plugin.json", ".claude-plugin/plugin.json"} {
		if _, err := root.Lstat(f); err == nil {
			if !ms.strict && entryHasComponents(ms.manifest) {
				return fmt.Errorf("the entry has strict: false and declares the plugin's parts itself, and the plugin's folder has its own %s as well: one of them must go", f)
			}
			return nil
		}
	}
	b, err := json.MarshalIndent(ms.manifest, "", "  ")
	if err != nil {
		return err
	}
	if err := root.Mkdir(".claude-plugin", 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("write the entry's manifest: %w", err)
	}
	w, err := root.OpenFile(".claude-plugin/plugin.json", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write the entry's manifest: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		w.Close()
		return fmt.Errorf("write the entry's manifest: %w", err)
	}
	return w.Close()
}

// componentKeys are the manifest keys that declare parts of a plugin.
var componentKeys = []string{"commands", "agents", "skills", "hooks", "mcpServers", "lspServers", "outputStyles", "userConfig", "monitors"}

func entryHasComponents(m map[string]any) bool {
	for _, k := range componentKeys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// remoteSchemes are the only git transports an entry of a remote marketplace may
// name: network fetches that run no program and use none of the operator's keys.
var remoteSchemes = map[string]bool{"https": true, "http": true, "git": true}

// entrySource resolves the repository a marketplace entry names. The marketplace's
// author wrote it, so it gets only what that author may ask of this machine:
//   - from a remote marketplace (fetched from a URL), only a network repository
//     (https://, http://, git://): never a local path or file:, which would read the
//     operator's own repositories, nor ssh (ssh://, user@host:path), which would
//     present the operator's ssh agent to a host of the author's choosing, nor a
//     transport helper (ext::, fd::, …), which runs a command;
//   - from a local marketplace (a folder on this machine), also a repository inside
//     that folder, once links are resolved: a path leaving it, through ".." or a
//     symlink, is refused.
func entrySource(raw string, mk source) (source, error) {
	if ghShortRE.MatchString(raw) {
		// owner/repo is GitHub's, unless a local marketplace has that folder.
		if _, err := os.Stat(filepath.Join(mk.target, raw)); mk.kind != "local" || err != nil {
			raw = githubURL(raw)
		}
	}
	if strings.Contains(raw, "::") {
		return source{}, fmt.Errorf("source %q names a git transport helper, which runs a command: refused", raw)
	}
	if mk.kind != "local" {
		u, err := url.Parse(raw)
		if err != nil || !remoteSchemes[u.Scheme] || u.Host == "" || u.Opaque != "" {
			return source{}, fmt.Errorf("source %q is not a network repository: a marketplace fetched from %s may name only https://, http:// or git:// repositories (never a local path, file:, or ssh, which would use this machine's files or the operator's ssh keys)", raw, mk.shown)
		}
		shown := raw
		if _, has := u.User.Password(); has {
			u.User = url.User(u.User.Username())
			shown = u.Redacted()
		}
		return source{kind: "git", target: raw, shown: shown}, nil
	}
	if urlSchemeRE.MatchString(raw) && !strings.HasPrefix(raw, "file://") || scpLikeRE.MatchString(raw) {
		return classify(raw) // a repository elsewhere, as the operator's own folder names it
	}
	p := strings.TrimPrefix(raw, "file://")
	if !filepath.IsAbs(p) {
		p = filepath.Join(mk.target, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return source{}, fmt.Errorf("source %q: %w", raw, err)
	}
	if real != mk.target && !strings.HasPrefix(real, mk.target+string(filepath.Separator)) {
		return source{}, fmt.Errorf("source %q resolves to %s, outside the marketplace folder %s: a local marketplace may name only repositories inside itself", raw, real, mk.target)
	}
	src, err := classify(real)
	if err != nil {
		return source{}, err
	}
	if src.kind != "local" {
		return source{}, fmt.Errorf("source %q: %s is not a git repository", raw, real)
	}
	return src, nil
}

// errLinkOnTheWay: a marketplace entry's folder lies behind a symlink of the
// marketplace repository, which may point anywhere.
var errLinkOnTheWay = errors.New("a symbolic link")

// noLinkOnTheWay checks that no folder on the way to rel in the marketplace commit
// is a symlink, so an entry names a folder of the marketplace itself.
func noLinkOnTheWay(ctx context.Context, g *git, repo, commit, rel string) error {
	if rel == "." || rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		out, err := g.run(ctx, repo, "ls-tree", "-z", "--full-tree", "--end-of-options", commit, "--", p)
		if err != nil {
			return fmt.Errorf("look up %s: %w", p, err)
		}
		mode, _, _ := strings.Cut(out, " ")
		switch mode {
		case "040000":
		case "":
			return fmt.Errorf("no folder %s in the marketplace", p)
		case "120000":
			return fmt.Errorf("%s is %w; an entry must name a folder inside the marketplace", p, errLinkOnTheWay)
		default:
			return fmt.Errorf("%s is not a folder", p)
		}
	}
	return nil
}
