package reexec

import "testing"

func TestHelperNameOnlyExactSpellings(t *testing.T) {
	for _, c := range []struct {
		argv0 string
		name  string
		ok    bool
	}{
		{"oz0:egress-bridge", "egress-bridge", true},
		{"/run/oz0-bin/oz0:egress-bridge", "egress-bridge", true},
		{"oz0-node", "", false},
		{"/usr/local/bin/oz0-node", "", false},
		{"oz0:", "", false},
		{"/tmp/oz0:egress-bridge", "", false},           // a planted file elsewhere
		{"./oz0:egress-bridge", "", false},              // relative spelling
		{"/run/oz0-bin/x/oz0:egress-bridge", "", false}, // deeper path
		{"/run/oz0-bin/oz0:a/b", "", false},             // helper name with a slash
		{"/run/oz0-bin/oz0-node", "", false},            // the plain bound binary
		{"x/run/oz0-bin/oz0:egress-bridge", "", false},  // not anchored
	} {
		n, ok := helperName(c.argv0)
		if n != c.name || ok != c.ok {
			t.Errorf("helperName(%q) = %q, %v; want %q, %v", c.argv0, n, ok, c.name, c.ok)
		}
	}
}
