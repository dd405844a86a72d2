package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/sandbox"
)

// treeDigest hashes every file, link and folder of dir: paths, kinds, link
// targets, contents and executable bits (the node may widen read and search
// bits for the plugin's user, never the contents).
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		io.WriteString(h, rel+"\x00"+fi.Mode().Type().String()+"\x00")
		if fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
			io.WriteString(h, "x\x00")
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			io.WriteString(h, l)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			io.Copy(h, f)
			f.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Published plugins' shapes, installed with `plugin install` and run by a strict
// node on each backend: a repository with a git submodule its server ignores
// (installs with the submodule left out and said so; its server runs), a
// remote-only plugin whose repository's package.json and requirements.txt cannot
// be built (nothing of them is built, and the install says so), and a bun
// server where bun is not installed (installs with a note; held back with a
// runtime-missing finding, never started, and a call of it answers why). The
// commit folders are byte-identical after the node ran them.
func TestE2EPublishedShapesInstallAndRun(t *testing.T) {
	if _, ok := sandbox.FindProgram("linux", "bun", nil); ok {
		t.Skip("not tested: bun is installed here, so a bun server without bun cannot be shown")
	}
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) { testPublishedShapes(t, backend) })
	}
}

func testPublishedShapes(t *testing.T, backend string) {
	n := newE2E(t, nil, "--backend", backend)
	n.stop()
	parent := filepath.Dir(n.data)

	sub, _ := gitRepo(t, parent, "submodule-ignored")
	os.WriteFile(filepath.Join(sub, ".gitmodules"), []byte("[submodule \"frontend\"]\n\tpath = third_party/frontend\n\turl = https://frontend.example/devtools-frontend.git\n"), 0o644)
	for _, args := range [][]string{
		{"update-index", "--add", "--cacheinfo", "160000,0123456789abcdef0123456789abcdef01234567,third_party/frontend"},
		{"add", ".gitmodules"},
		{"-c", "user.name=t", "-c", "user.email=t@oz0.invalid", "commit", "-qm", "vendor the frontend"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", sub}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	remote, _ := gitRepo(t, parent, "remote-only-tooling")
	bun, _ := gitRepo(t, parent, "bun-server")
	for repo, want := range map[string]string{
		sub:    "note: left out 1 git submodule(s), which are not part of the commit's own files: third_party/frontend",
		remote: "note: package.json not built: nothing that runs here uses Node.js (server docs (remote))",
		bun:    "note: server main starts bun, which is not installed on this node",
	} {
		out, err := n.oz("plugin", "install", repo, "--by", "e2e")
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("install %s: %v\n%s\nwant %q", repo, err, out, want)
		}
	}
	d, _ := datadir.New(n.data)
	digests := map[string]string{}
	for _, name := range []string{"submodule-ignored", "remote-only-tooling", "bun-server"} {
		in, err := installed.Lookup(d, name)
		if err != nil {
			t.Fatal(err)
		}
		digests[in.Dir] = treeDigest(t, in.Dir)
	}

	n.start("--backend", backend)
	n.waitState("submodule-ignored", "main", api.StateRunning)
	if out, err := n.oz("call", "submodule-ignored__echo", "--arg", "text=vendored"); err != nil || !strings.Contains(out, "vendored") {
		t.Fatalf("the server beside a left-out submodule: %v\n%s", err, out)
	}

	s := n.waitState("bun-server", "main", api.StateRefused)
	if !strings.Contains(strings.Join(s.Reasons, " "), "starts bun, which is not installed on this node") {
		t.Fatalf("bun server reasons: %v", s.Reasons)
	}
	found := false
	for _, f := range n.status().Findings {
		found = found || f.Code == api.CodeRuntimeMissing && f.Subject == "bun-server/main"
	}
	if !found {
		t.Fatalf("no runtime-missing finding: %+v", n.status().Findings)
	}
	if out, err := n.oz("call", "bun-server__anything"); err == nil || !strings.Contains(out, "bun") {
		t.Errorf("a call of the held-back bun server: %v\n%s", err, out)
	}
	time.Sleep(2 * time.Second) // a crash loop would have restarted it by now
	for _, p := range n.status().Plugins {
		for _, s := range p.Servers {
			if p.Name == "bun-server" && (s.Restarts != 0 || s.State != api.StateRefused) {
				t.Fatalf("bun server %+v: started (crash loop)", s)
			}
		}
	}
	for _, f := range n.status().Findings {
		if f.Code == api.CodeCrashLoop {
			t.Fatalf("crash loop: %+v", f)
		}
	}
	n.stop()
	for dir, was := range digests {
		if got := treeDigest(t, dir); got != was {
			t.Errorf("%s changed while the node ran its plugins", dir)
		}
	}
}
