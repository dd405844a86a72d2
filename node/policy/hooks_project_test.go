package policy

import "testing"

func TestProjectRefusal(t *testing.T) {
	for _, c := range []struct {
		project string
		ok      bool
	}{
		{"/home/dev/src/app", true},
		{"/srv/repo", true},
		{"/", false},
		{"relative/dir", false},
		{"/home/dev", false},
		{"/home", false},
		{"/home/dev/.local/share/oz0-node", false},
		{"/home/dev/.local/share/oz0-node/plugins/x", false},
		{"/home/dev/.local/share", false},
		{"/proc/self", false},
		{"/home/dev/.local/share/oz0-node-other", true},
	} {
		why := ProjectRefusal(c.project, "/home/dev/.local/share/oz0-node", "/home/dev")
		if (why == "") != c.ok {
			t.Errorf("ProjectRefusal(%q) = %q; want ok %v", c.project, why, c.ok)
		}
	}
}

func TestParseHookProject(t *testing.T) {
	got, err := ParseHookProject([]string{"b,a", "a"})
	if err != nil || len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range []string{"*", "A", "a=b", ""} {
		if _, err := ParseHookProject([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
