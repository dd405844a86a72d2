package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseExemptions(t *testing.T) {
	got, err := ParseExemptions([]string{"a,b@ABCDEF0", " c ", "a", "b@abcdef0", "d@" + commit})
	if err != nil {
		t.Fatal(err)
	}
	want := []Exemption{{Name: "a"}, {Name: "b", Commit: "abcdef0"}, {Name: "c"}, {Name: "d", Commit: commit}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := ParseExemptions(nil); err != nil || got != nil {
		t.Errorf("no flags: %v, %v", got, err)
	}
	for _, bad := range []string{"", "a,", ",a", "A", "a_b", "a@", "a@abc", "a@abcdefg", "a@" + strings.Repeat("a", 65), "@abcdef0", "a@b@abcdef0", strings.Repeat("a", 65)} {
		_, err := ParseExemptions([]string{bad})
		if err == nil || !strings.Contains(err.Error(), "--plugin-sandbox-exempt") {
			t.Errorf("ParseExemptions(%q): err %v", bad, err)
		}
	}
}

func TestMatchExemptions(t *testing.T) {
	for name, tc := range map[string]struct {
		es       []Exemption
		plugin   string
		commit   string
		matched  string
		mismatch []string
	}{
		"name":                 {[]Exemption{{Name: "p"}}, "p", commit, "p", nil},
		"name without commit":  {[]Exemption{{Name: "p"}}, "p", "", "p", nil},
		"full commit":          {[]Exemption{{Name: "p", Commit: commit}}, "p", commit, "p@" + commit, nil},
		"prefix of 7":          {[]Exemption{{Name: "p", Commit: commit[:7]}}, "p", commit, "p@" + commit[:7], nil},
		"prefix of 6":          {[]Exemption{{Name: "p", Commit: commit[:6]}}, "p", commit, "", []string{"p@" + commit[:6]}},
		"upper-case installed": {[]Exemption{{Name: "p", Commit: commit[:8]}}, "p", strings.ToUpper(commit), "p@" + commit[:8], nil},
		"other commit":         {[]Exemption{{Name: "p", Commit: "fedcba9"}}, "p", commit, "", []string{"p@fedcba9"}},
		"no installed commit":  {[]Exemption{{Name: "p", Commit: "fedcba9"}}, "p", "", "", []string{"p@fedcba9"}},
		"longer than commit":   {[]Exemption{{Name: "p", Commit: commit + "00"}}, "p", commit, "", []string{"p@" + commit + "00"}},
		"other plugin":         {[]Exemption{{Name: "q"}, {Name: "q", Commit: "fedcba9"}}, "p", commit, "", nil},
		"name prefix no match": {[]Exemption{{Name: "p"}}, "pp", commit, "", nil},
		"mismatch and name":    {[]Exemption{{Name: "p", Commit: "fedcba9"}, {Name: "p"}}, "p", commit, "p", nil},
		"first match wins":     {[]Exemption{{Name: "p", Commit: commit[:7]}, {Name: "p"}}, "p", commit, "p@" + commit[:7], nil},
	} {
		r := MatchExemptions(tc.es, tc.plugin, tc.commit)
		if r.Matched != tc.matched || !reflect.DeepEqual(r.Mismatched, tc.mismatch) {
			t.Errorf("%s: %+v, want matched %q mismatched %q", name, r, tc.matched, tc.mismatch)
		}
	}
}
