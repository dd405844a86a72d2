package toolrule

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func parse(t *testing.T, s string) *Rules {
	t.Helper()
	rs, err := Parse(strings.NewReader(s), "tenant/tools")
	if err != nil {
		t.Fatal(err)
	}
	return &Rules{Path: "tenant/tools", Rules: rs}
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func TestDecide(t *testing.T) {
	denyOnly := parse(t, "# the tenant's tools\ndeny *__delete_*\ndeny annotation:destructiveHint # per MCP's default too\n")
	allowList := parse(t, "allow weather__*\nallow files__read\ndeny weather__purge\n")
	safe := Hints{ReadOnly: yes()}
	for _, c := range []struct {
		rs       *Rules
		name     string
		h        Hints
		allow    bool
		rule     string
		unlisted bool
	}{
		{nil, "a__b", Hints{}, true, "", false},
		{&Rules{Missing: true}, "a__b", Hints{}, true, "", false},
		{&Rules{Err: errors.New("line 2: bad")}, "a__b", safe, false, "tool rules unusable: line 2: bad", false},
		{denyOnly, "files__delete_all", safe, false, "deny *__delete_* (line 2)", false},
		{denyOnly, "files__read", safe, true, "", false},
		// MCP's defaults: a tool that says nothing may be destructive.
		{denyOnly, "files__read", Hints{}, false, "deny annotation:destructiveHint (line 3)", false},
		{denyOnly, "files__write", Hints{ReadOnly: no(), Destructive: no()}, true, "", false},
		// A read-only tool is never destructive, whatever else it says.
		{denyOnly, "files__write", Hints{ReadOnly: yes(), Destructive: yes()}, true, "", false},
		{allowList, "weather__today", safe, true, "allow weather__* (line 1)", false},
		{allowList, "files__read", safe, true, "allow files__read (line 2)", false},
		{allowList, "files__write", safe, false, "no allow line of tenant/tools covers files__write", true},
		// Deny wins over an earlier allow.
		{allowList, "weather__purge", safe, false, "deny weather__purge (line 3)", false},
	} {
		d := c.rs.Decide(c.name, c.h)
		if d.Allow != c.allow || d.Rule != c.rule || d.Unlisted != c.unlisted {
			t.Errorf("%s %+v: got %+v, want allow=%v rule=%q unlisted=%v", c.name, c.h, d, c.allow, c.rule, c.unlisted)
		}
	}
}

func TestHints(t *testing.T) {
	for _, c := range []struct {
		h    Hints
		name string
		want bool
	}{
		{Hints{}, ReadOnly, false},
		{Hints{}, Destructive, true},
		{Hints{}, Idempotent, false},
		{Hints{}, OpenWorld, true},
		{Hints{OpenWorld: no()}, OpenWorld, false},
		{Hints{Idempotent: yes()}, Idempotent, true},
		{Hints{ReadOnly: yes()}, Destructive, false},
		{Hints{}, "madeUpHint", false},
	} {
		if got := c.h.Has(c.name); got != c.want {
			t.Errorf("%+v.Has(%s) = %v, want %v", c.h, c.name, got, c.want)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for in, want := range map[string]string{
		"allow a__b\npermit a__b\n":         "line 2",
		"deny\n":                            "line 1",
		"allow a__b c\n":                    "line 1",
		"deny annotation:dangerHint\n":      "line 1: annotation",
		"allow a/b\n":                       "line 1: pattern",
		"\n\nallow weather\n":               "line 3: pattern \"weather\": names no plugin's tool",
		"allow " + strings.Repeat("a", 300): "line 1",
		strings.Repeat("#", 2<<20):          "longer than",
	} {
		_, err := Parse(strings.NewReader(in), "tenant/tools")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want an error with %q", in, err, want)
		}
	}
	rs, err := Parse(strings.NewReader("allow *\ndeny annotation:openWorldHint\r\n"), "x")
	if err != nil || len(rs) != 2 || rs[0].Pattern != "*" || rs[1].Annotation != OpenWorld || rs[1].Line != 2 {
		t.Fatalf("got %+v, %v", rs, err)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, n string
		want bool
	}{
		{"*", "", true},
		{"*", "a__b", true},
		{"a__b", "a__b", true},
		{"a__b", "a__bc", false},
		{"a__*", "a__", true},
		{"a__*", "ab__c", false},
		{"*__delete*", "files__delete_all", true},
		{"*__delete*", "files__undelete", false},
		{"*a*a*a*b", strings.Repeat("a", 40), false},
		{"**", "x", true},
	} {
		if got := Glob(c.p, c.n); got != c.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
}

// FuzzGlob compares the matcher with path.Match over names with no path
// separators or classes, where "*" means the same.
func FuzzGlob(f *testing.F) {
	f.Add("a*b*c", "aXbYc")
	f.Add("*__*", "p__t")
	f.Fuzz(func(t *testing.T, p, n string) {
		if strings.ContainsAny(p+n, "/[]\\?") {
			return
		}
		want, err := path.Match(p, n)
		if err != nil {
			return
		}
		if got := Glob(p, n); got != want {
			t.Fatalf("Glob(%q, %q) = %v, path.Match says %v", p, n, got, want)
		}
	})
}

// FuzzParse: any file either parses into rules that each render back and parse
// the same, or fails with an error naming a line or the size.
func FuzzParse(f *testing.F) {
	f.Add("allow a__*\ndeny annotation:destructiveHint # x\n")
	f.Add("deny *\n\n#\n")
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := Parse(strings.NewReader(s), "f")
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "longer than") {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		for _, r := range rs {
			text, _, _ := strings.Cut(r.String(), " (line")
			back, err := ParseRule(text)
			back.Line = r.Line
			if err != nil || back != r {
				t.Fatalf("%+v renders as %q, which parses as %+v, %v", r, text, back, err)
			}
		}
	})
}
