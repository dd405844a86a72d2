package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/installed"
)

// A root node whose binary its plugin users cannot reach (under a folder only
// root traverses) runs a plugin as the node's user instead and says why
// (docs/promises.md §8). What the plugin wrote as its own user — its home, its
// view — is handed over to the user it runs as now, and back again when its own
// user can reach its folders once more: a sandbox cannot use a folder another
// uid owns, so without the hand-over the plugin crash-loops after the switch.
func TestE2EAPluginKeepsItsFoldersWhenItsUserChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: per-plugin users and the node's-user fallback need a root node")
	}
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("not tested: bwrap is not installed")
	}
	n := newE2E(t, []string{"writes-own-folder"}, "--backend", "bwrap")
	n.waitState("writes-own-folder", "main", api.StateRunning)
	in, err := installed.Lookup(n.dir(), "writes-own-folder")
	if err != nil {
		t.Fatal(err)
	}
	view, home := n.dir().View("writes-own-folder", in.Commit), n.dir().Home("writes-own-folder")
	starts := func(dir string) int {
		b, _ := os.ReadFile(filepath.Join(dir, "starts"))
		return strings.Count(string(b), "start")
	}
	waitStarts := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for (starts(filepath.Join(view, ".venv")) != want || starts(home) != want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if v, h := starts(filepath.Join(view, ".venv")), starts(home); v != want || h != want {
			t.Fatalf("starts recorded in its view %d, in its home %d; want %d each", v, h, want)
		}
	}
	owner := func(p string) uint32 {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	waitStarts(1)
	server := func() api.Server { return n.status().Plugins[0].Servers[0] }
	pluginUID := uint32(n.status().Plugins[0].UID)
	if pluginUID == 0 || owner(home) != pluginUID || owner(filepath.Join(view, ".venv", "starts")) != pluginUID {
		t.Fatalf("as its own user (uid %d): home owned by %d, view by %d", pluginUID, owner(home), owner(filepath.Join(view, ".venv", "starts")))
	}

	// The same node from a binary only root can reach.
	n.stop()
	hidden, err := os.MkdirTemp("", "oz0-private-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hidden) })
	os.Chmod(hidden, 0o700)
	reachable := n.bin
	n.bin = filepath.Join(hidden, "oz0-node")
	copyFile(t, reachable, n.bin)
	n.start("--backend", "bwrap")
	n.waitState("writes-own-folder", "main", api.StateRunning)
	waitStarts(2)
	if s := server(); s.User != "node user" {
		t.Errorf("server user %q; want the node's user", s.User)
	}
	for _, p := range []string{home, filepath.Join(home, "starts"), view, filepath.Join(view, ".venv", "starts")} {
		if owner(p) != 0 {
			t.Errorf("%s is owned by uid %d while the plugin runs as the node's user", p, owner(p))
		}
	}
	if out, err := n.oz("call", "writes-own-folder__echo", "--arg", "text=as the node's user"); err != nil || strings.TrimSpace(out) != "as the node's user" {
		t.Fatalf("call as the node's user: %v %q", err, out)
	}

	// Its own user again: what it wrote as the node's user is its own.
	n.stop()
	n.bin = reachable
	n.start("--backend", "bwrap")
	n.waitState("writes-own-folder", "main", api.StateRunning)
	waitStarts(3)
	for _, p := range []string{home, filepath.Join(home, "starts"), view, filepath.Join(view, ".venv", "starts")} {
		if owner(p) != pluginUID {
			t.Errorf("%s is owned by uid %d; want its user %d", p, owner(p), pluginUID)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
