package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
)

// linkTarget is a folder standing for what a plugin would point its home at
// (~/Library/LaunchAgents, ~/.ssh, the node's logs/), with what it holds now.
type linkTarget struct {
	dir  string
	st   syscall.Stat_t
	ents int
}

func newLinkTarget(t *testing.T) *linkTarget {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "LaunchAgents")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep.plist"), []byte("operator's"), 0o644); err != nil {
		t.Fatal(err)
	}
	lt := &linkTarget{dir: dir, ents: 1}
	if err := syscall.Stat(dir, &lt.st); err != nil {
		t.Fatal(err)
	}
	return lt
}

// unchanged fails the test if anything at the target changed: mode, owner,
// entries.
func (lt *linkTarget) unchanged(t *testing.T) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(lt.dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != lt.st.Mode || st.Uid != lt.st.Uid || st.Gid != lt.st.Gid {
		t.Errorf("the link's target changed: mode %o uid %d gid %d, was mode %o uid %d gid %d", st.Mode, st.Uid, st.Gid, lt.st.Mode, lt.st.Uid, lt.st.Gid)
	}
	if ents, _ := os.ReadDir(lt.dir); len(ents) != lt.ents {
		t.Errorf("the link's target gained entries: %v", ents)
	}
}

// replaceHome puts a link to target where the plugin's home is, as a plugin
// running as the node's user could.
func replaceHome(t *testing.T, data, plugin, target string) {
	t.Helper()
	d, _ := datadir.New(data)
	if err := os.RemoveAll(d.Home(plugin)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, d.Home(plugin)); err != nil {
		t.Fatal(err)
	}
}

// exec refuses a plugin whose home is a link, on every backend and unsandboxed,
// and leaves the link's target as it was.
func TestExecRefusesALinkedHome(t *testing.T) {
	bin, data := execNode(t, "demo")
	lt := newLinkTarget(t)
	replaceHome(t, data, "demo", lt.dir)
	for _, backend := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendNone} {
		t.Run(backend, func(t *testing.T) {
			_, errs, code := runOz(bin, data, nil, "exec", "demo", "--backend", backend, "--", "sh", "-c", "touch \"$HOME/planted\"")
			if code != 0 && strings.Contains(errs, "does not work on this node") {
				t.Skipf("%s does not work here: %s", backend, errs)
			}
			if code == 0 || !strings.Contains(errs, "symlink") {
				t.Errorf("exec with a linked home: exit %d, %s; want a refusal naming the link", code, errs)
			}
			lt.unchanged(t)
		})
	}
}

// A running node does not start a server whose home is a link, says why, and
// leaves the link's target as it was.
func TestE2ENodeRefusesALinkedHome(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"demo"}, "--backend", backend)
			n.waitState("demo", "main", api.StateRunning)
			n.stop()
			lt := newLinkTarget(t)
			os.Chmod(filepath.Dir(lt.dir), 0o711)
			replaceHome(t, n.data, "demo", lt.dir)
			n.start("--backend", backend)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && !strings.Contains(n.log.String(), "symlink") {
				time.Sleep(100 * time.Millisecond)
			}
			if !strings.Contains(n.log.String(), "never follows it") {
				t.Errorf("the node's log does not say the home is a link:\n%s", n.log.String())
			}
			for _, p := range n.status().Plugins {
				for _, s := range p.Servers {
					if p.Name == "demo" && s.State == api.StateRunning {
						t.Errorf("demo/%s runs with a linked home", s.Name)
					}
				}
			}
			lt.unchanged(t)
		})
	}
}
