package installed

import (
	"strings"
	"testing"
)

// A resolved launcher starts its entry point with the node's managed runtime and
// the manifest's arguments after the package; a runtime that went missing is an
// error naming it, not a start of something else.
func TestLaunchArgv(t *testing.T) {
	rs := &RuntimeSet{Node: &Runtime{Command: "/usr/bin/node"}, Python: &Runtime{Command: "/usr/bin/python3"}}
	l := Launch{Server: "fs", Runtime: "node", Package: "p", Entry: ".oz0/launch/fs/node_modules/p/dist/index.js", Skip: 2}
	got, err := l.Argv("/data/plugins/x/abc", rs, []string{"-y", "p@1", "/a", "--b"})
	if err != nil || strings.Join(got, " ") != "/usr/bin/node /data/plugins/x/abc/.oz0/launch/fs/node_modules/p/dist/index.js /a --b" {
		t.Errorf("node argv %q %v", got, err)
	}
	py := Launch{Server: "f", Runtime: "python", Package: "p", Entry: "p.cli:main", Command: "p-cli", Skip: 1}
	got, err = py.Argv("/d", rs, []string{"p-cli", "x"})
	if err != nil || got[0] != "/usr/bin/python3" || got[1] != "-c" || !strings.Contains(got[2], `"/d/.oz0/site-packages"`) || !strings.Contains(got[2], `import_module("p.cli")`) || got[3] != "x" {
		t.Errorf("python argv %q %v", got, err)
	}
	bun := Launch{Server: "b", Runtime: "bun", Package: "p"}
	if _, err := bun.Argv("/d", rs, nil); err == nil || !strings.Contains(err.Error(), "no managed bun runtime") {
		t.Errorf("a missing runtime: %v", err)
	}
}
