package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// What a running node learns of a plugin (its user cannot reach its folders)
// reaches a decision only through the call that passes it: the node itself does
// not change, so every other decision keeps the plugin's own user.
func TestLearnedReachesOnlyTheCallThatPassesIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: per-plugin users exist only on root nodes; not tested here")
	}
	tmp := t.TempDir()
	for dir := tmp; dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		os.Chmod(dir, 0o711) // plugin users traverse to their folders, as under /var/lib
	}
	d, err := datadir.New(filepath.Join(tmp, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	installBare(t, d, "walled")
	n := New(d, config.Run{DataDir: d.Root, Mode: policy.Strict}, probe.Assume("linux", policy.BackendBwrap, false), nil)
	if !n.Traversable {
		t.Fatalf("test data folder %s is not traversable (under %s)", d.Root, n.Blocker)
	}
	before, err := n.One("walled")
	if err != nil {
		t.Fatal(err)
	}
	if !before.Decision.User.PerPlugin {
		t.Fatalf("walled runs as %s before anything is learned, want its own user", before.Decision.User)
	}
	why := "/srv/walled is 0700"
	all, _ := installed.List(d)
	l := Learned{UserUnreachable: map[string]string{"walled": why}}
	ps, _ := n.PlanLearned(all, l)
	one, err := n.OneLearned("walled", l)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*Plugin{"PlanLearned": ps[0], "OneLearned": one} {
		if p.Decision.User.PerPlugin || !strings.Contains(p.Decision.User.Why, why) {
			t.Errorf("%s: walled runs as %s (%q), want the node's user with the reason", name, p.Decision.User, p.Decision.User.Why)
		}
	}
	after, err := n.One("walled")
	if err != nil {
		t.Fatal(err)
	}
	if !after.Decision.User.PerPlugin {
		t.Errorf("a decision without what was learned runs walled as %s: the node was changed", after.Decision.User)
	}
}
