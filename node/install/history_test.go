package install

import (
	"os"
	"path/filepath"
	"testing"
)

// cloneOf clones repo with git's own options (e.g. --depth 1, --filter) into a
// new folder, as a user holding a plugin repository would.
func cloneOf(t *testing.T, repo string, opts ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	argv := append([]string{"git", "-c", "protocol.file.allow=always", "clone", "-q"}, opts...)
	run(t, filepath.Dir(dir), append(argv, "file://"+repo, dir)...)
	return dir
}

// A shallow clone (one commit, no history) installs: the node fetches the one
// commit it installs, not the history. A commit pinned behind what the clone
// holds is an error that says the history is incomplete, not a bare git message.
func TestShallowCloneInstalls(t *testing.T) {
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"TWO": "2\n"})
	c3 := commitFiles(t, repo, map[string]string{"THREE": "3\n"})
	shallow := cloneOf(t, repo, "--depth", "1")

	d := newData(t)
	in := mustInstall(t, d, Options{Source: shallow})
	if in.Commit != c3 || readFile(t, filepath.Join(in.Dir, "THREE")) != "3\n" {
		t.Fatalf("installed %s from a shallow clone, want %s with its files", in.Commit, c3)
	}
	mustInstall(t, newData(t), Options{Source: shallow, Commit: c3[:10]})
	installErr(t, newData(t), Options{Source: shallow, Commit: c1}, "its history is incomplete (a shallow clone, cut at "+c3[:12])

	// Two commits deep: the one behind the tip is there to install, and checked
	// to be reached by the ref.
	two := cloneOf(t, repo, "--depth", "2")
	if got := mustInstall(t, newData(t), Options{Source: two, Commit: c2}); got.Commit != c2 {
		t.Fatalf("installed %s, want %s", got.Commit, c2)
	}
	installErr(t, newData(t), Options{Source: two, Commit: c1}, "a shallow clone, cut at "+c2[:12])
}

// A partial clone (git clone --filter=blob:none) whose commit has its files
// installs; one that lacks them is an error naming the partial clone, and the
// node does not fetch them from its origin behind the operator's back.
func TestPartialCloneInstallsWhenItsCommitIsWhole(t *testing.T) {
	// The first commit holds a file the second deletes: a partial clone never
	// fetches it, so only a fetch of the one commit finds everything it needs.
	repo, _ := newRepo(t, "demo", map[string]string{"OLD": "only in history\n"})
	run(t, repo, "git", "config", "uploadpack.allowFilter", "true")
	run(t, repo, "git", "rm", "-q", "OLD")
	c2 := commitFiles(t, repo, map[string]string{"TWO": "2\n"})

	whole := cloneOf(t, repo, "--filter=blob:none", "--no-local")
	if out := run(t, whole, "git", "config", "remote.origin.promisor"); out != "true" {
		t.Fatalf("not a partial clone: promisor=%q", out)
	}
	in := mustInstall(t, newData(t), Options{Source: whole})
	if in.Commit != c2 || readFile(t, filepath.Join(in.Dir, "TWO")) != "2\n" {
		t.Fatalf("installed %s, want %s with its files", in.Commit, c2)
	}

	// Without a checkout the commit's files were never fetched. The origin is moved
	// away so that a fetch from it would fail loudly rather than quietly succeed.
	lacking := cloneOf(t, repo, "--filter=blob:none", "--no-local", "--no-checkout")
	if err := os.Rename(repo, repo+".gone"); err != nil {
		t.Fatal(err)
	}
	installErr(t, newData(t), Options{Source: lacking}, "is a partial clone (git clone --filter) that lacks files of HEAD's commit")
}

// A ref that names no commit says so.
func TestRefOfATreeIsNotACommit(t *testing.T) {
	repo, _ := newRepo(t, "demo", nil)
	tree := run(t, repo, "git", "rev-parse", "HEAD^{tree}")
	run(t, repo, "git", "tag", "treetag", tree)
	installErr(t, newData(t), Options{Source: repo, Ref: "treetag"}, "treetag of "+repo+" is not a commit")
}
