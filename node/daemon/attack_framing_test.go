package daemon_test

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A server's result reaches the caller as one line with nothing a line reader
// could split on: a carriage return between a result's tokens (which the SDK's
// path never sends) could otherwise end a line in a caller that splits on it,
// and the next "line" be a whole response the server made up.
func TestHostileServerCannotBreakTheCallersFraming(t *testing.T) {
	n := startHostile(t)
	rc := n.rawStdio(t)
	rc.send(toolCall(1, "unruly__echo", map[string]any{"text": "warm"}))
	rc.response("1", 5*time.Second)
	rc.send(toolCall(2, "hostile__crlf", map[string]any{}))
	r := rc.response("2", 5*time.Second)
	if r.text() != "own" {
		t.Errorf("hostile__crlf: %q", r.raw)
	}
	if body := bytes.TrimSuffix(r.raw, []byte("\n")); bytes.ContainsAny(body, "\r\n") {
		t.Errorf("the caller's line holds a line break: %q", r.raw)
	}
}

// A server's result reaches the caller as valid UTF-8, as the SDK's path sends
// it: bytes that are no UTF-8 would fail a strict reader on the whole line.
func TestHostileServerResultIsValidUTF8(t *testing.T) {
	n := startHostile(t)
	rc := n.rawStdio(t)
	rc.send(toolCall(2, "hostile__badutf8", map[string]any{}))
	r := rc.response("2", 5*time.Second)
	if !utf8.Valid(r.raw) || !strings.HasPrefix(r.text(), "own ") {
		t.Errorf("hostile__badutf8: %q", r.raw)
	}
}
