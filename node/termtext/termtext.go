// Package termtext makes text that a plugin wrote (manifest fields, reasons, server
// stderr, tool output, finding messages) safe to print on a terminal: nothing in it
// can move the cursor, set the window title, write the clipboard, reorder what the
// operator reads or forge a line of the node's own output.
package termtext

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Clean returns s with every terminal control removed, keeping newlines and tabs:
// escape sequences whole (CSI, OSC, DCS, SOS, PM, APC with their payloads, and the
// two-byte forms), the other C0 controls and DEL, C1 controls (whose 8-bit forms
// start sequences too), bidirectional overrides and isolates, and the Unicode line
// and paragraph separators. A byte that is not UTF-8 becomes U+FFFD.
func Clean(s string) string { return clean(s, true) }

// Line is Clean for text shown on one line: newlines, tabs and carriage returns
// become spaces, so a value cannot start a line that looks like the node's own.
func Line(s string) string { return clean(s, false) }

// Lines applies Line to each string.
func Lines(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = Line(s)
	}
	return out
}

// Safe reports whether s holds nothing Clean would change.
func Safe(s string) bool { return Clean(s) == s }

const (
	esc = 0x1b
	bel = 0x07
	// C1 controls that open a sequence in their 8-bit form.
	c1DCS = 0x90
	c1SOS = 0x98
	c1CSI = 0x9b
	c1ST  = 0x9c
	c1OSC = 0x9d
	c1PM  = 0x9e
	c1APC = 0x9f
)

func clean(s string, multiline bool) string {
	if isPlain(s, multiline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
			i++
			continue
		case r == esc:
			i += escapeLen(s[i:])
			continue
		case r == c1CSI:
			i += size + csiLen(s[i+size:])
			continue
		case r == c1OSC || r == c1DCS || r == c1SOS || r == c1PM || r == c1APC:
			i += size + stringLen(s[i+size:])
			continue
		case r == '\n' || r == '\t':
			if multiline {
				b.WriteRune(r)
			} else {
				b.WriteByte(' ')
			}
		case r == '\r':
			if !multiline {
				b.WriteByte(' ')
			}
		case dropped(r):
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isPlain is the fast path: printable ASCII (plus \n and \t when multiline).
func isPlain(s string, multiline bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f || multiline && (c == '\n' || c == '\t') {
			continue
		}
		return false
	}
	return true
}

// dropped are the runes removed on their own.
func dropped(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // bidi marks
		return true
	case r >= 0x202a && r <= 0x202e: // bidi embeddings and overrides
		return true
	case r >= 0x2066 && r <= 0x2069: // bidi isolates
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// escapeLen is the length of the escape sequence at the start of s (s[0] is ESC).
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch c := s[1]; {
	case c == '[':
		return 2 + csiLen(s[2:])
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return 2 + stringLen(s[2:])
	case c >= 0x20 && c <= 0x2f: // intermediates (e.g. ESC ( B), then a final byte
		n := 1
		for n < len(s) && s[n] >= 0x20 && s[n] <= 0x2f {
			n++
		}
		if n < len(s) && s[n] >= 0x30 && s[n] <= 0x7e {
			n++
		}
		return n
	case c >= 0x30 && c <= 0x7e:
		return 2
	}
	return 1 // a lone ESC: the next character is shown (or cleaned) on its own
}

// csiLen is the length of a control sequence's parameters, intermediates and final
// byte at the start of s.
func csiLen(s string) int {
	n := 0
	for n < len(s) && s[n] >= 0x20 && s[n] <= 0x3f {
		n++
	}
	if n < len(s) && s[n] >= 0x40 && s[n] <= 0x7e {
		n++
	}
	return n
}

// stringLen is the length of a control string (an OSC title or clipboard payload,
// a DCS…) up to and including its terminator: BEL, ESC \ or ST. An unterminated one
// runs to the end of s.
func stringLen(s string) int {
	for i := 0; i < len(s); {
		switch {
		case s[i] == bel:
			return i + 1
		case s[i] == esc:
			if i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			return i // another sequence starts: the terminal ends this one here
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == c1ST {
			return i + size
		}
		i += size
	}
	return len(s)
}

// EscapeJSON rewrites, in JSON that encoding/json produced, every rune a terminal
// could act on that encoding/json leaves raw (DEL, C1 controls, bidi controls) as
// a \uXXXX escape. Such runes can only stand inside JSON strings, so the result
// decodes to the same values.
func EscapeJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && r >= 0x20 && dropped(r) {
			if out == nil {
				out = append(make([]byte, 0, len(b)+16), b[:i]...)
			}
			out = append(out, `\u`...)
			h := strconv.FormatInt(int64(r), 16)
			out = append(out, strings.Repeat("0", 4-len(h))+h...)
		} else if out != nil {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}
