package install

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// git runs the git binary against a repository in staging with an explicit, minimal
// environment. Nothing from the fetched repository can make git run a program: no
// system or global config (so no filter, fsmonitor, hook or credential helper is
// defined anywhere), hooks pointed at /dev/null, no attribute files, only the
// transport protocols named below, no submodule followed by git itself (submodules.go
// fetches them one by one, when asked), and the files are never checked
// out by git — the tree is read with ls-tree and cat-file and written by us.
type git struct {
	home  string // HOME for git: a folder in staging
	local string // the local source repository, when fetching from a path
	// proxy, when set, is the only way git reaches the network: an http(s)
	// proxy URL (with its credential). Only http(s) is allowed then, and none of
	// the operator's credentials (no ssh agent) go along: a submodule's URL is
	// the plugin's choice, not the operator's.
	proxy string
}

// gitEnv is the whole environment git gets.
func (g *git) env() []string {
	allow := "https:http:ssh:git"
	switch {
	case g.proxy != "":
		allow = "https:http"
	case g.local != "":
		allow += ":file"
	}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + g.home,
		"XDG_CONFIG_HOME=" + path.Join(g.home, ".config"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=" + allow,
		"GIT_SSH_COMMAND=ssh -o BatchMode=yes",
		"LC_ALL=C",
	}
	if g.proxy != "" {
		// In the environment, not on the command line, where any local user could
		// read the proxy's credential.
		return append(env, "http_proxy="+g.proxy, "https_proxy="+g.proxy, "GIT_HTTP_PROXY_AUTHMETHOD=basic", "no_proxy=")
	}
	// An ssh agent socket carries no secret in the environment and lets an operator
	// fetch private repositories over ssh.
	if s := os.Getenv("SSH_AUTH_SOCK"); s != "" {
		env = append(env, "SSH_AUTH_SOCK="+s)
	}
	return env
}

func (g *git) args(extra ...string) []string {
	a := []string{
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.fsmonitor=false",
		"-c", "core.attributesFile=/dev/null",
		"-c", "credential.helper=",
		"-c", "protocol.allow=never",
		"-c", "protocol.https.allow=always",
		"-c", "protocol.http.allow=always",
		"-c", "protocol.ssh.allow=always",
		"-c", "protocol.git.allow=always",
		"-c", "fetch.recurseSubmodules=false",
		"-c", "submodule.recurse=false",
	}
	if g.proxy != "" {
		// Fetching one commit by its hash needs protocol v2; the ssh and git
		// transports would not go through the proxy.
		a = append(a, "-c", "protocol.version=2", "-c", "protocol.ssh.allow=never", "-c", "protocol.git.allow=never")
	}
	if g.local != "" {
		// The local upload-pack reads the source repository's config; these -c values
		// reach it through GIT_CONFIG_PARAMETERS and override anything it sets.
		// safe.directory names only this repository so a root node can fetch an
		// operator's checkout without trusting every repository on the machine.
		a = append(a, "-c", "protocol.file.allow=always", "-c", "safe.directory="+g.local)
	}
	return append(a, extra...)
}

func (g *git) cmd(ctx context.Context, repo string, args ...string) *exec.Cmd {
	all := g.args()
	if repo != "" {
		all = append(all, "--git-dir="+repo)
	}
	c := exec.CommandContext(ctx, "git", append(all, args...)...)
	c.Env = g.env()
	c.Dir = g.home
	dieWithUs(c)
	return c
}

// run runs git and returns its stdout; a failure carries git's own message.
func (g *git) run(ctx context.Context, repo string, args ...string) (string, error) {
	out, _, err := g.run3(ctx, repo, args...)
	return out, err
}

// runWarn runs git like run and returns, on success, what git wrote on stderr
// (a fetch that rejects a ref says so there and still exits 0).
func (g *git) runWarn(ctx context.Context, repo string, args ...string) (string, error) {
	_, warn, err := g.run3(ctx, repo, args...)
	return warn, err
}

func (g *git) run3(ctx context.Context, repo string, args ...string) (stdout, stderr string, err error) {
	c := g.cmd(ctx, repo, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err = c.Run()
	msg := strings.TrimSpace(errb.String())
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	if err != nil {
		if msg == "" {
			return "", "", fmt.Errorf("git %s: %w", args[0], err)
		}
		return "", "", fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return strings.TrimSpace(out.String()), msg, nil
}

var refRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._/+-]*$`)

// checkRef refuses refs git would read as options or that are not ref names.
func checkRef(ref string) error {
	if ref == "HEAD" {
		return nil
	}
	if !refRE.MatchString(ref) || strings.Contains(ref, "..") || strings.HasSuffix(ref, ".lock") ||
		strings.HasSuffix(ref, "/") || strings.Contains(ref, "//") || len(ref) > 255 {
		return fmt.Errorf("--ref %q: not a branch, tag or ref name", ref)
	}
	return nil
}

// fetch brings the commit to install from ref of source into a fresh bare
// repository at repo and returns it: want (a full or abbreviated hash, which ref
// must reach) or the commit ref points at. It fetches that one commit, not the
// history: a shallow clone holds it whole, and so does a partial clone that has
// its files. History is fetched only to check that ref reaches a pinned commit
// behind its tip. A source whose history or objects stop short of what is needed
// is an error that says so.
func (g *git) fetch(ctx context.Context, repo, source, ref, want string) (string, error) {
	if _, err := g.run(ctx, "", "init", "-q", "--bare", repo); err != nil {
		return "", fmt.Errorf("create staging repository: %w", err)
	}
	if ref == "" {
		ref = "HEAD"
	}
	if err := checkRef(ref); err != nil {
		return "", err
	}
	refspec := "+" + ref + ":refs/oz0/ref"
	warn, err := g.runWarn(ctx, repo, "fetch", "-q", "--depth=1", "--no-tags", "--no-recurse-submodules", "--end-of-options", source, refspec)
	if err != nil && strings.Contains(err.Error(), "shallow") && !strings.Contains(err.Error(), "promisor") {
		// A transport without shallow fetches (git's dumb HTTP): the whole history.
		warn, err = g.runWarn(ctx, repo, "fetch", "-q", "--no-tags", "--no-recurse-submodules", "--end-of-options", source, refspec)
	}
	if err != nil {
		return "", g.incomplete(source, ref, fmt.Errorf("fetch %s of %s: %w", ref, source, err))
	}
	tip, err := g.run(ctx, repo, "rev-parse", "--verify", "-q", "--end-of-options", "refs/oz0/ref^{commit}")
	if err != nil {
		if _, terr := g.run(ctx, repo, "rev-parse", "--verify", "-q", "--end-of-options", "refs/oz0/ref"); terr == nil {
			return "", fmt.Errorf("%s of %s is not a commit (a tag of a tree or blob)", ref, source)
		}
		why := "the fetch brought nothing"
		if warn != "" {
			why = "git: " + warn
		}
		return "", g.incomplete(source, ref, fmt.Errorf("%s of %s was not fetched (%s)", ref, source, why))
	}
	if want == "" {
		return tip, nil
	}
	if strings.HasPrefix(tip, want) {
		return tip, nil
	}
	// A pinned commit behind the tip: the ref's history, to find it and to check
	// that the ref reaches it.
	if sh, _ := g.run(ctx, repo, "rev-parse", "--is-shallow-repository"); sh == "true" {
		if _, err := g.run(ctx, repo, "fetch", "-q", "--unshallow", "--no-tags", "--no-recurse-submodules", "--end-of-options", source, refspec); err != nil {
			return "", g.incomplete(source, ref, fmt.Errorf("fetch the history of %s of %s: %w", ref, source, err))
		}
	}
	full, err := g.run(ctx, repo, "rev-parse", "--verify", "-q", "--end-of-options", want+"^{commit}")
	if err != nil || !fullCommitRE.MatchString(full) {
		if bounds := g.shallowBounds(repo); bounds != "" {
			return "", fmt.Errorf("commit %s is not in the history of %s that %s holds: its history is incomplete (a shallow clone, cut at %s); fetch its history there (git fetch --unshallow) or install from the repository it was cloned from", want, ref, source, bounds)
		}
		return "", fmt.Errorf("commit %s is not reached by %s of %s (not in its history)", want, ref, source)
	}
	c := g.cmd(ctx, repo, "merge-base", "--is-ancestor", "--end-of-options", full, tip)
	if err := c.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 {
			return "", fmt.Errorf("commit %s is not reached by %s of %s (at %s)", want, ref, source, tip[:12])
		}
		return "", fmt.Errorf("check that %s reaches %s: %w", ref, want, err)
	}
	return full, nil
}

// incomplete adds to a failed fetch from a local repository what is missing
// there: objects of a partial clone (git clone --filter), which the source's own
// git does not fetch for us, or history cut short by a shallow clone.
func (g *git) incomplete(source, ref string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "promisor remote"):
		return fmt.Errorf("%w\n%s is a partial clone (git clone --filter) that lacks files of %s's commit; the node fetches nothing on its behalf: install from the repository it was cloned from, or have it fetch them first (git -C %s checkout %s fetches that commit's files)", err, source, ref, source, ref)
	case g.local != "" && strings.Contains(msg, "shallow"):
		return fmt.Errorf("%w\n%s is a shallow clone (its history is cut short)", err, source)
	}
	return err
}

// shallowBounds lists (abbreviated) the commits where repo's history is cut,
// or "" when it is whole.
func (g *git) shallowBounds(repo string) string {
	b, err := os.ReadFile(path.Join(repo, "shallow"))
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range strings.Fields(string(b)) {
		out = append(out, short(l))
		if len(out) == 3 {
			out = append(out, "…")
			break
		}
	}
	return strings.Join(out, ", ")
}

var fullCommitRE = lazyre.New(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// treeEntry is one file of a commit's tree.
type treeEntry struct {
	mode string // 100644, 100755, 120000 (symlink), 160000 (submodule)
	oid  string
	size int64
	path string // relative to the plugin root (the subdir, if any)
}

// listTree lists the files of commit (below subdir), and apart from them its
// submodules, and enforces the limits before a byte is written.
func (g *git) listTree(ctx context.Context, repo, commit, subdir string) ([]treeEntry, []gitlink, error) {
	treeish := commit
	if subdir != "" {
		treeish = commit + ":" + subdir
		if t, err := g.run(ctx, repo, "cat-file", "-t", "--end-of-options", treeish); err != nil || t != "tree" {
			return nil, nil, fmt.Errorf("--subdir %s: no such folder in commit %s", subdir, commit[:12])
		}
	}
	out, err := g.run(ctx, repo, "ls-tree", "-r", "-z", "-l", "--full-tree", "--end-of-options", treeish)
	if err != nil {
		return nil, nil, fmt.Errorf("list files of %s: %w", commit, err)
	}
	var ents []treeEntry
	var links []gitlink
	var total int64
	for _, rec := range strings.Split(out, "\x00") {
		if rec == "" {
			continue
		}
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 {
			return nil, nil, fmt.Errorf("list files of %s: unexpected line %q", commit, rec)
		}
		if err := checkRelPath(p); err != nil {
			return nil, nil, err
		}
		e := treeEntry{mode: f[0], oid: f[2], path: p}
		switch f[0] {
		case "100644", "100755", "120000":
			n, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("list files of %s: size of %s: %w", commit, p, err)
			}
			e.size = n
		case "160000":
			if !fullCommitRE.MatchString(e.oid) {
				return nil, nil, fmt.Errorf("%s: a git submodule whose commit %q is not a commit hash", p, e.oid)
			}
			links = append(links, gitlink{path: p, repoPath: path.Join(subdir, p), commit: e.oid})
			continue
		default:
			return nil, nil, fmt.Errorf("%s: unsupported git file mode %s", p, f[0])
		}
		total += e.size
		if len(ents)+1 > MaxFiles {
			return nil, nil, fmt.Errorf("plugin has more than %d files", MaxFiles)
		}
		if total > MaxTotalBytes {
			return nil, nil, fmt.Errorf("plugin files exceed %d bytes in total (at %s)", MaxTotalBytes, p)
		}
		ents = append(ents, e)
	}
	return ents, links, nil
}

// writeTree writes the listed files into dst (an empty folder) from the object
// database, streaming through one cat-file process. Symlinks are checked to stay
// inside the plugin and written last, so no file is ever written through one.
func (g *git) writeTree(ctx context.Context, repo string, ents []treeEntry, dst string) error {
	if err := checkTreeLinks(ents); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return fmt.Errorf("open staging folder: %w", err)
	}
	defer root.Close()

	c := g.cmd(ctx, repo, "cat-file", "--batch")
	var in bytes.Buffer
	for _, e := range ents {
		in.WriteString(e.oid + "\n")
	}
	c.Stdin = &in
	var errb bytes.Buffer
	c.Stderr = &errb
	stdout, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("read files: %w", err)
	}
	defer c.Wait()
	br := bufio.NewReaderSize(stdout, 1<<16)
	var links []treeEntry
	var targets []string
	for _, e := range ents {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read %s: %w (%s)", e.path, err, strings.TrimSpace(errb.String()))
		}
		f := strings.Fields(hdr)
		if len(f) != 3 || f[0] != e.oid || f[1] != "blob" {
			return fmt.Errorf("read %s: unexpected object header %q", e.path, strings.TrimSpace(hdr))
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || n != e.size {
			return fmt.Errorf("read %s: size %s, listed as %d", e.path, f[2], e.size)
		}
		body := io.LimitReader(br, n)
		if e.mode == "120000" {
			b, err := io.ReadAll(body)
			if err != nil {
				return fmt.Errorf("read %s: %w", e.path, err)
			}
			if err := checkLink(e.path, string(b)); err != nil {
				return err
			}
			links = append(links, e)
			targets = append(targets, string(b))
		} else {
			mode := os.FileMode(0o644)
			if e.mode == "100755" {
				mode = 0o755
			}
			if err := writeFile(root, e.path, body, mode); err != nil {
				return err
			}
		}
		if _, err := br.Discard(1); err != nil { // the newline after each object
			return fmt.Errorf("read %s: %w", e.path, err)
		}
	}
	for i, e := range links {
		if dir := path.Dir(e.path); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", dir, err)
			}
		}
		if err := root.Symlink(targets[i], e.path); err != nil {
			return fmt.Errorf("create symlink %s: %w", e.path, err)
		}
	}
	return nil
}

// writeFile creates one new file under root (never following a symlink out of it)
// and fsyncs it.
func writeFile(root *os.Root, p string, r io.Reader, mode os.FileMode) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	// The umask may have narrowed the mode; the plugin's own bits are what we want.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return f.Close()
}
