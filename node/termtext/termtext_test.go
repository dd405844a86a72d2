package termtext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanRemovesWhatDrivesATerminal(t *testing.T) {
	for _, c := range []struct{ name, in, clean, line string }{
		{"plain", "a plugin: v1.0 (ok)", "a plugin: v1.0 (ok)", "a plugin: v1.0 (ok)"},
		{"newline and tab", "a\n\tb", "a\n\tb", "a  b"},
		{"carriage return", "safe\rEVIL", "safeEVIL", "safe EVIL"},
		{"window title OSC 0 BEL", "x\x1b]0;pwned\x07y", "xy", "xy"},
		{"clipboard OSC 52 ST", "x\x1b]52;c;cm0gLXJmIH4K\x1b\\y", "xy", "xy"},
		{"OSC 8 hyperlink", "\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\", "click", "click"},
		{"unterminated OSC", "x\x1b]0;title to the end", "x", "x"},
		{"OSC cut by another escape", "x\x1b]0;t\x1b[2Jy", "xy", "xy"},
		{"CSI colour", "\x1b[31mred\x1b[0m", "red", "red"},
		{"CSI clear and home", "a\x1b[2J\x1b[Hb", "ab", "ab"},
		{"CSI private", "a\x1b[?1049hb", "ab", "ab"},
		{"DCS", "a\x1bPq#0;2;0;0;0\x1b\\b", "ab", "ab"},
		{"APC", "a\x1b_payload\x07b", "ab", "ab"},
		{"charset", "a\x1b(0b", "ab", "ab"},
		{"two-byte", "a\x1bcb\x1b7c", "abc", "abc"},
		{"lone ESC at end", "a\x1b", "a", "a"},
		{"8-bit CSI", "a\u009b31mb", "ab", "ab"},
		{"8-bit OSC", "a\u009d0;t\u009cb", "ab", "ab"},
		{"C1 NEL", "a\u0085b", "ab", "ab"},
		{"raw 8-bit CSI byte", "a\x9b2Jb", "a\uFFFD2Jb", "a\uFFFD2Jb"},
		{"C0 and DEL", "a\x00\x07\x08\x0b\x0c\x7fb", "ab", "ab"},
		{"bidi override", "evil\u202egnp.exe", "evilgnp.exe", "evilgnp.exe"},
		{"bidi isolates and marks", "\u2066a\u2069\u200e\u200f\u061c", "a", "a"},
		{"line separator", "a\u2028b\u2029c", "abc", "abc"},
		{"unicode kept", "café — 日本 ✓", "café — 日本 ✓", "café — 日本 ✓"},
		{"forged line", "desc\n  REFUSED: nothing", "desc\n  REFUSED: nothing", "desc   REFUSED: nothing"},
	} {
		if got := Clean(c.in); got != c.clean {
			t.Errorf("%s: Clean(%q) = %q, want %q", c.name, c.in, got, c.clean)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("%s: Line(%q) = %q, want %q", c.name, c.in, got, c.line)
		}
	}
}

func TestEscapeJSONKeepsValues(t *testing.T) {
	v := map[string]string{"d": "a\x1b]0;t\x07\u009b2J\u202e\x7fb"}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := EscapeJSON(raw)
	if !Safe(string(out)) {
		t.Errorf("escaped JSON still drives a terminal: %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["d"] != v["d"] {
		t.Errorf("escaped JSON decodes to %q (%v), want %q", back["d"], err, v["d"])
	}
}

// terminalActive reports whether s holds anything a terminal acts on.
func terminalActive(s string, multiline bool) bool {
	for _, r := range s {
		if (r == '\n' || r == '\t') && multiline {
			continue
		}
		if dropped(r) || r == '\r' {
			return true
		}
	}
	return false
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"a\x1b]0;t\x07b", "\x1b[31m", "\u009b1m", "x\u202ey", "\xff\x9b", "a\nb\tc\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, l := Clean(s), Line(s)
		if terminalActive(c, true) || terminalActive(l, false) || !utf8.ValidString(c) || !utf8.ValidString(l) {
			t.Fatalf("Clean(%q) = %q, Line = %q: still active or invalid", s, c, l)
		}
		if Clean(c) != c || Line(l) != l {
			t.Fatalf("not idempotent on %q", s)
		}
		if strings.Contains(l, "\n") {
			t.Fatalf("Line(%q) has a newline", s)
		}
		raw, _ := json.Marshal(s)
		if e := EscapeJSON(raw); terminalActive(string(e), false) {
			t.Fatalf("EscapeJSON(%q) = %q", raw, e)
		}
	})
}
