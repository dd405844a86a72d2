package install

import "testing"

// A lockfile's "resolved" may name the operator's registry or npm's own default
// (npm fetches that from the operator's registry instead); any other URL, git
// source or path outside the plugin is refused.
func TestLockfileResolvedAgainstTheConfiguredRegistry(t *testing.T) {
	r := &npmRegistry{url: "https://mirror.example/npm/", builtin: "https://default.example/"}
	for resolved, ok := range map[string]bool{
		"https://mirror.example/npm/ms/-/ms-2.1.3.tgz": true,
		"https://default.example/ms/-/ms-2.1.3.tgz":    true,
		"":         true,
		"vendor/x": true,
		"https://mirror.example/other/ms-2.1.3.tgz":   false,
		"https://elsewhere.example/ms/-/ms-2.1.3.tgz": false,
		"git+ssh://git@example.com/x.git":             false,
		"../outside":                                  false,
	} {
		if got := r.resolvedProblem(resolved, false) == ""; got != ok {
			t.Errorf("resolved %q accepted=%v, want %v (%s)", resolved, got, ok, r.resolvedProblem(resolved, false))
		}
	}
}
