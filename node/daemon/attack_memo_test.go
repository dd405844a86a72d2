package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/userconf"
)

// The per-call check's memo is not fooled by a configuration rewritten in place
// to the same size with its modification time put back (as `cp -p`, `touch -r`,
// an archive's restore or a second write within the clock's tick leave it): the
// required token taken away refuses the next call, as a fresh decision does.
func TestCallCheckMemoSeesARewriteThatKeepsSizeAndTime(t *testing.T) {
	n := needsConfigNode(t)
	file := userconf.File(n.d, "needs-config")
	cs := n.stdioClientWith(t, nil)
	allowedThrice(t, cs)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, same inode (written in place), same modification time.
	nb := bytes.Replace(b, []byte(`"api_token"`), []byte(`"api_tokeX"`), 1)
	if bytes.Equal(nb, b) {
		t.Fatalf("the configuration holds no api_token: %s", b)
	}
	if err := os.WriteFile(file, nb, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if fi2, err := os.Stat(file); err != nil || !os.SameFile(fi, fi2) || fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the rewrite changed the file's identity: %v", err)
	}
	pastMemoWindow()
	out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"})
	if !isErr || !strings.Contains(out, "refused") {
		t.Errorf("a call after the required token was taken away (size and time kept): %q (error %v); want a refusal", out, isErr)
	}
}

// The per-call check's memo follows its inputs' folders with a watch (one
// system call a call); a configuration that is a link to a file elsewhere, or
// a file with a second name elsewhere, changes without an event in that folder.
// Taken away through the other name, the required token refuses the next call.
func TestCallCheckMemoSeesAConfigChangedThroughAnotherName(t *testing.T) {
	for _, kind := range []string{"symbolic link", "hard link"} {
		t.Run(kind, func(t *testing.T) {
			n := needsConfigNode(t)
			file := userconf.File(n.d, "needs-config")
			elsewhere := filepath.Join(t.TempDir(), "values.json")
			var err error
			if kind == "symbolic link" {
				if err = os.Rename(file, elsewhere); err == nil {
					err = os.Symlink(elsewhere, file)
				}
			} else {
				err = os.Link(file, elsewhere)
			}
			if err != nil {
				t.Fatal(err)
			}
			pastMemoWindow()
			cs := n.stdioClientWith(t, nil)
			allowedThrice(t, cs)
			b, err := os.ReadFile(elsewhere)
			if err != nil {
				t.Fatal(err)
			}
			nb := bytes.Replace(b, []byte(`"api_token"`), []byte(`"api_tokeX"`), 1)
			if err := os.WriteFile(elsewhere, nb, 0o600); err != nil {
				t.Fatal(err)
			}
			out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"})
			if !isErr || !strings.Contains(out, "refused") {
				t.Errorf("a call after the token was taken away through the file's other name: %q (error %v); want a refusal", out, isErr)
			}
		})
	}
}

// The configuration folder swapped for another (renamed away, a new one put in
// its place): a later change in the new folder refuses the next call, as it
// would had the folder never been swapped.
func TestCallCheckMemoFollowsASwappedConfigFolder(t *testing.T) {
	n := needsConfigNode(t)
	folder := userconf.Folder(n.d)
	cs := n.stdioClientWith(t, nil)
	allowedThrice(t, cs)
	if err := os.Rename(folder, folder+".old"); err != nil {
		t.Fatal(err)
	}
	if err := userconf.Save(n.d, "needs-config", userconf.Values{"api_token": "t0ken"}); err != nil {
		t.Fatal(err)
	}
	pastMemoWindow()
	allowedThrice(t, cs)
	// In place, size and times kept: only an event of the new folder tells.
	file := userconf.File(n.d, "needs-config")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, bytes.Replace(b, []byte(`"api_token"`), []byte(`"api_tokeX"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"})
	if !isErr || !strings.Contains(out, "refused") {
		t.Errorf("a call after the token was taken away in the new folder: %q (error %v); want a refusal", out, isErr)
	}
}

// allowedThrice makes three calls the check allows, so that it answers the
// next from its memo.
func allowedThrice(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	for range 3 {
		if out, isErr := call(t, cs, "needs-config__echo", map[string]any{"text": "ok"}); isErr || out != "ok" {
			t.Fatalf("needs-config__echo: %q (error %v)", out, isErr)
		}
	}
}
