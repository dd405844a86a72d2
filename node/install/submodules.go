package install

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"oz0.ai/node/node/installed"
)

// A git submodule is a gitlink in the tree: a commit of another repository,
// named by .gitmodules, not part of the commit's own files. By default an
// install leaves each one out (an empty folder, as a checkout without
// `git submodule update` has) and says so; with --submodules it fetches each at
// the commit the tree pins, and writes its files under the same rules as the
// plugin's own (docs/plugin-format.md "Submodules").

// maxSubmoduleDepth bounds submodules of submodules.
const maxSubmoduleDepth = 4

// gitlink is one submodule entry of a tree.
type gitlink struct {
	path     string // in the plugin tree
	repoPath string // in its repository (the key of .gitmodules)
	commit   string
}

// subOpts say what extract does with submodules.
type subOpts struct {
	fetch bool
	// base is the repository's network URL, which relative submodule URLs
	// (../other.git) resolve against; "" when it has none.
	base  string
	allow []netip.Prefix
	st    string
	log   *slog.Logger
}

// extracted is what extract wrote beyond the commit's own files.
type extracted struct {
	submodules []installed.Submodule
	notes      []string
}

// extract writes the files of commit (below subdir) into tree, and its
// submodules as so says.
func extract(ctx context.Context, g *git, repo, commit, subdir, tree string, so subOpts) (*extracted, error) {
	ents, links, err := g.listTree(ctx, repo, commit, subdir)
	if err != nil {
		return nil, err
	}
	x := &extracted{}
	var empty []string
	if len(links) > 0 && !so.fetch {
		var names []string
		for _, l := range links {
			names = append(names, l.path)
			empty = append(empty, l.path)
		}
		note := fmt.Sprintf("left out %d git submodule(s), which are not part of the commit's own files: %s (each is an empty folder; install with --submodules to fetch them at the commits the tree pins)", len(links), strings.Join(names, ", "))
		so.log.Warn(note)
		x.notes = append(x.notes, note)
	}
	if len(links) > 0 && so.fetch {
		more, subs, err := g.submodules(ctx, repo, commit, links, so, 1)
		if err != nil {
			return nil, err
		}
		ents = append(ents, more...)
		x.submodules = subs
	}
	if err := checkLimits(ents); err != nil {
		return nil, err
	}
	// The empty folders count as entries, so none lies below a link of the tree.
	all := ents
	for _, p := range empty {
		all = append(all, treeEntry{mode: "040000", path: p})
	}
	if err := checkTreeLinks(all); err != nil {
		return nil, err
	}
	if err := g.writeTree(ctx, repo, ents, tree); err != nil {
		return nil, err
	}
	if len(empty) > 0 {
		root, err := os.OpenRoot(tree)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		for _, p := range empty {
			if err := root.MkdirAll(p, 0o755); err != nil {
				return nil, fmt.Errorf("create %s: %w", p, err)
			}
		}
	}
	return x, nil
}

// checkLimits holds a tree with its submodules to the limits on one plugin.
func checkLimits(ents []treeEntry) error {
	if len(ents) > MaxFiles {
		return fmt.Errorf("plugin has more than %d files", MaxFiles)
	}
	var total int64
	for _, e := range ents {
		if total += e.size; total > MaxTotalBytes {
			return fmt.Errorf("plugin files exceed %d bytes in total (at %s)", MaxTotalBytes, e.path)
		}
	}
	return nil
}

// submodules fetches each gitlink of commit at the commit it pins and returns its
// files (and its own submodules'), with paths in the plugin tree.
func (g *git) submodules(ctx context.Context, repo, commit string, links []gitlink, so subOpts, depth int) ([]treeEntry, []installed.Submodule, error) {
	if depth > maxSubmoduleDepth {
		return nil, nil, fmt.Errorf("%s: submodules nested more than %d deep", links[0].path, maxSubmoduleDepth)
	}
	mods, err := g.gitmodules(ctx, repo, commit)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: a git submodule, and %w", links[0].path, err)
	}
	var ents []treeEntry
	var subs []installed.Submodule
	for _, l := range links {
		raw, ok := mods[l.repoPath]
		if !ok {
			return nil, nil, fmt.Errorf("submodule %s: no entry with path %s in .gitmodules", l.path, l.repoPath)
		}
		u, err := submoduleURL(raw, so.base)
		if err != nil {
			return nil, nil, fmt.Errorf("submodule %s: %w", l.path, err)
		}
		if err := g.fetchSubmodule(ctx, repo, u, l.commit, so); err != nil {
			return nil, nil, fmt.Errorf("submodule %s: %w", l.path, err)
		}
		files, nested, err := g.listTree(ctx, repo, l.commit, "")
		if err != nil {
			return nil, nil, fmt.Errorf("submodule %s: %w", l.path, err)
		}
		for _, f := range files {
			f.path = l.path + "/" + f.path
			ents = append(ents, f)
		}
		if err := checkLimits(ents); err != nil {
			return nil, nil, err
		}
		subs = append(subs, installed.Submodule{Path: l.path, URL: u.Redacted(), Commit: l.commit})
		so.log.Info("submodule fetched", "path", l.path, "url", u.Redacted(), "commit", l.commit)
		if len(nested) > 0 {
			for i := range nested {
				nested[i].path = l.path + "/" + nested[i].path
			}
			inner := so
			inner.base = u.String()
			more, moreSubs, err := g.submodules(ctx, repo, l.commit, nested, inner, depth+1)
			if err != nil {
				return nil, nil, err
			}
			ents = append(ents, more...)
			subs = append(subs, moreSubs...)
		}
	}
	return ents, subs, nil
}

// gitmodules reads the path → url entries of commit's .gitmodules (git config
// read from the blob: no include is followed, nothing runs).
func (g *git) gitmodules(ctx context.Context, repo, commit string) (map[string]string, error) {
	blob := commit + ":.gitmodules"
	if t, err := g.run(ctx, repo, "cat-file", "-t", "--end-of-options", blob); err != nil || t != "blob" {
		return nil, fmt.Errorf("the repository has no .gitmodules saying where it comes from")
	}
	out, err := g.run(ctx, repo, "config", "--blob", blob, "-z", "--get-regexp", `^submodule\..*\.(path|url)$`)
	if err != nil {
		return nil, fmt.Errorf("read .gitmodules: %w", err)
	}
	paths, urls := map[string]string{}, map[string]string{}
	for _, rec := range strings.Split(out, "\x00") {
		k, v, ok := strings.Cut(rec, "\n")
		if !ok {
			continue
		}
		k = strings.TrimPrefix(k, "submodule.")
		dot := strings.LastIndex(k, ".")
		if dot < 0 {
			continue
		}
		switch name, field := k[:dot], k[dot+1:]; field {
		case "path":
			paths[name] = v
		case "url":
			urls[name] = v
		}
	}
	mods := map[string]string{}
	names := make([]string, 0, len(paths))
	for n := range paths {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if u, ok := urls[n]; ok {
			mods[path.Clean(paths[n])] = u
		}
	}
	return mods, nil
}

// submoduleURL resolves a .gitmodules URL as git does (./ and ../ against the
// repository's URL) and keeps only http(s): a submodule is fetched through the
// install's egress proxy, which checks every address it dials. A local path or
// file: URL is refused (git itself refuses them for submodules by default), and
// so are ssh and git://, which the proxy does not carry.
func submoduleURL(raw, base string) (*url.URL, error) {
	if strings.HasPrefix(raw, "./") || strings.HasPrefix(raw, "../") {
		if base == "" {
			return nil, fmt.Errorf("its URL %q is relative, and the repository has no http(s) URL to resolve it against (a local repository without an http(s) remote.origin.url)", raw)
		}
		b, err := url.Parse(base)
		if err != nil || (b.Scheme != "https" && b.Scheme != "http") {
			return nil, fmt.Errorf("its URL %q is relative to %s, which is not an http(s) URL; submodules are fetched over http(s) only", raw, base)
		}
		p, rest := strings.TrimSuffix(b.Path, "/"), raw
		for {
			if r, ok := strings.CutPrefix(rest, "./"); ok {
				rest = r
			} else if r, ok := strings.CutPrefix(rest, "../"); ok {
				rest, p = r, path.Dir(p)
			} else {
				break
			}
		}
		b.Path = path.Join("/", p, rest)
		b.RawPath = ""
		raw = b.String()
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("its URL %q is not http(s); submodules are fetched over http(s) only, through the install's egress proxy (never a local path, file:, ssh or git://)", raw)
	case u.User != nil:
		return nil, fmt.Errorf("its URL %s carries credentials; the node fetches submodules without any", u.Redacted())
	case u.Hostname() == "":
		return nil, fmt.Errorf("its URL %q names no host", raw)
	}
	return u, nil
}

// fetchSubmodule brings commit of the repository at u into repo: that one commit
// (by its hash, which protocol v2 servers allow), else the branches and tags
// that hold it. git reaches u only through an egress proxy of the install's own
// that allows u's host alone, with none of the operator's credentials (no ssh
// agent, no credential helper).
func (g *git) fetchSubmodule(ctx context.Context, repo string, u *url.URL, commit string, so subOpts) error {
	hp, err := urlHostPort(u)
	if err != nil {
		return err
	}
	e, err := newInstallEgress(so.st, "submodule", "git submodule", []hostPort{hp}, so.allow, so.log)
	if err != nil {
		return err
	}
	defer e.Close()
	proxy, err := e.loopback()
	if err != nil {
		return err
	}
	sg := &git{home: g.home, proxy: proxy.String()}
	_, err = sg.run(ctx, repo, "fetch", "-q", "--depth=1", "--no-tags", "--no-recurse-submodules", "--end-of-options", u.String(), commit)
	if err != nil && e.refusals() == "" {
		_, err = sg.run(ctx, repo, "fetch", "-q", "--no-tags", "--no-recurse-submodules", "--end-of-options", u.String(),
			"+refs/heads/*:refs/oz0/sub/heads/*", "+refs/tags/*:refs/oz0/sub/tags/*")
	}
	if why := e.refusals(); why != "" {
		return fmt.Errorf("fetch %s: %s", u.Redacted(), why)
	}
	if err != nil {
		return fmt.Errorf("fetch %s at %s: %w", u.Redacted(), short(commit), err)
	}
	if _, err := g.run(ctx, repo, "cat-file", "-e", "--end-of-options", commit+"^{commit}"); err != nil {
		return fmt.Errorf("commit %s, which the tree pins, is not on any branch or tag of %s", short(commit), u.Redacted())
	}
	return nil
}

// originURL is a local repository's remote.origin.url, read from its config
// file alone (no include followed), when it is http(s): what relative submodule
// URLs resolve against.
func (g *git) originURL(ctx context.Context, local string) string {
	cfg := filepath.Join(local, ".git", "config")
	if fi, err := os.Stat(filepath.Join(local, ".git")); err != nil || !fi.IsDir() {
		cfg = filepath.Join(local, "config")
	}
	out, err := g.run(ctx, "", "config", "--file", cfg, "--get", "remote.origin.url")
	if err != nil || (!strings.HasPrefix(out, "https://") && !strings.HasPrefix(out, "http://")) {
		return ""
	}
	return out
}
