package install

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// source is what a SOURCE argument turned out to be.
type source struct {
	kind   string // "git", "local" (a local git repository) or "folder"
	target string // URL or absolute path
	// shown is the source as recorded: absolute paths, URLs without passwords.
	shown string
}

var (
	scpLikeRE   = lazyre.New(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)
	ghShortRE   = lazyre.New(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)
	urlSchemeRE = lazyre.New(`^(https?|ssh|git|file)://`)
)

func classify(s string) (source, error) {
	if s == "" || strings.HasPrefix(s, "-") || strings.ContainsAny(s, "\x00\n\r") {
		return source{}, fmt.Errorf("source %q: not a git URL, repository or folder", s)
	}
	s = strings.TrimPrefix(s, "file://")
	if fi, err := os.Stat(s); err == nil {
		abs, err := filepath.Abs(s)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs) // copy and fetch the real folder
		}
		if err != nil {
			return source{}, fmt.Errorf("source %s: %w", s, err)
		}
		if !fi.IsDir() {
			return source{}, fmt.Errorf("source %s: not a folder or git repository", abs)
		}
		if isGitRepo(abs) {
			return source{kind: "local", target: abs, shown: abs}, nil
		}
		return source{kind: "folder", target: abs, shown: abs}, nil
	}
	if urlSchemeRE.MatchString(s) {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return source{}, fmt.Errorf("source %q: not a valid URL", s)
		}
		shown := s
		if _, has := u.User.Password(); has {
			u.User = url.User(u.User.Username())
			shown = u.Redacted()
		}
		return source{kind: "git", target: s, shown: shown}, nil
	}
	if scpLikeRE.MatchString(s) {
		return source{kind: "git", target: s, shown: s}, nil
	}
	if ghShortRE.MatchString(s) {
		// GitHub's owner/repo shorthand, as Claude Code reads it (no such folder here).
		u := githubURL(s)
		return source{kind: "git", target: u, shown: u}, nil
	}
	return source{}, fmt.Errorf("source %q: no such folder, and not a git URL (https://, ssh://, git://, user@host:path) or GitHub owner/repo", s)
}

func isGitRepo(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
		return true
	}
	// A bare repository.
	for _, f := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

func checkSubdir(s string) (string, error) {
	if s == "" || s == "." {
		return "", nil
	}
	c := path.Clean(filepath.ToSlash(s))
	if err := checkRelPath(c); err != nil {
		return "", fmt.Errorf("--subdir %q: must be a folder inside the repository: %w", s, err)
	}
	return c, nil
}

// fetched is a plugin's files in staging and where they came from.
type fetched struct {
	tree        string
	source      string // as recorded
	ref         string
	commit      string
	subdir      string
	private     bool
	marketplace string
	// x is what the fetch wrote beside the commit's own files (submodules) or
	// left out, and says so.
	x *extracted
}

// makeFetchDirs creates in staging st the folders a fetch writes: home (git's
// home) and tree (the plugin's files).
func makeFetchDirs(st string) error {
	for _, p := range []string{filepath.Join(st, "home"), filepath.Join(st, "tree")} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("create staging: %w", err)
		}
	}
	return nil
}

// fetchSource writes the plugin's files from a repository or folder into
// <st>/tree.
func fetchSource(ctx context.Context, st string, o Options, log *slog.Logger) (*fetched, error) {
	home, tree := filepath.Join(st, "home"), filepath.Join(st, "tree")
	src, err := classify(o.Source)
	if err != nil {
		return nil, err
	}
	f := &fetched{tree: tree, source: src.shown, ref: o.Ref, subdir: o.Subdir, private: o.Private}
	if src.kind == "folder" {
		if o.Ref != "" || o.Commit != "" {
			return nil, fmt.Errorf("source %s is a plain folder: it has no --ref or --commit (make it a git repository to pin a commit)", src.shown)
		}
		from := src.target
		if o.Subdir != "" {
			from = filepath.Join(from, filepath.FromSlash(o.Subdir))
		}
		fi, err := os.Lstat(from)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("--subdir %s: no such folder in %s", o.Subdir, src.shown)
		}
		log.Info("installing a plain folder as a private candidate", "folder", from)
		f.private = true
		if f.commit, err = copyFolder(from, tree); err != nil {
			return nil, fmt.Errorf("source %s: %w", from, err)
		}
		reached(o.afterStep, stepFetched)
		return f, nil
	}
	g := &git{home: home}
	if src.kind == "local" {
		g.local = src.target
	}
	repo := filepath.Join(st, "repo.git")
	if f.commit, err = g.fetch(ctx, repo, src.target, o.Ref, o.Commit); err != nil {
		return nil, err
	}
	reached(o.afterStep, stepFetched)
	so := o.subOpts(st, log)
	switch src.kind {
	case "git":
		so.base = src.target
	case "local":
		so.base = g.originURL(ctx, src.target)
	}
	if f.x, err = extract(ctx, g, repo, f.commit, f.subdir, tree, so); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", src.shown, short(f.commit), err)
	}
	return f, nil
}

// subOpts are what a fetch does with submodules, as o asks.
func (o Options) subOpts(st string, log *slog.Logger) subOpts {
	return subOpts{fetch: o.Submodules, allow: o.AllowCIDRs, st: st, log: log}
}

// short is a commit as messages show it.
func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
