package backendlinux

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"oz0.ai/node/node/pluginuser"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// A plugin's folders keep the modes the install gives them (root:gid 0750): a start
// reaches them through the plugin's group and never opens them to other users, so
// another plugin's user can neither list nor read them, while the plugin's own
// sandbox still reads its files.
func TestStartKeepsPluginFolders0750(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo", "egress-demo")
		uid := policy.PluginUID("demo")
		if err := pluginuser.Prepare(n.dir, "demo", uid, uid); err != nil {
			t.Fatal(err)
		}
		commit := n.dir.PluginCommit("demo", testCommit)
		folders := []string{n.dir.Plugin("demo"), commit}
		mode := func(p string) (os.FileMode, uint32) {
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid
		}
		for _, p := range folders {
			if m, gid := mode(p); m != 0o750 || gid != uid {
				t.Fatalf("before the start %s is %04o group %d, want 0750 group %d", p, m, gid, uid)
			}
		}
		// Its own files, at the path it sees them (its view's, on a backend without
		// a mount namespace).
		r := n.sh("demo", "cat $PLUGIN_ROOT/plugin.json")
		if r.code != 0 || !strings.Contains(r.stdout, `"demo"`) {
			t.Fatalf("the plugin cannot read its own files: %s", r)
		}
		for _, p := range folders {
			if m, gid := mode(p); m != 0o750 || gid != uid {
				t.Errorf("after a start %s is %04o group %d, want 0750 group %d", p, m, gid, uid)
			}
		}
		// Another plugin's user, as a host process (the uid every process of its
		// sandboxes has outside the namespaces), can neither list nor read them.
		other := policy.PluginUID("egress-demo")
		for _, argv := range [][]string{{"ls", commit}, {"cat", commit + "/plugin.json"}} {
			c := exec.Command(argv[0], argv[1:]...)
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other, Groups: []uint32{}}}
			if out, err := c.CombinedOutput(); err == nil {
				t.Errorf("another plugin's user ran %q on demo's folder: %s", argv, out)
			}
		}
	})
}
