package daemon_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A session its client ended takes no call afterwards, on the fast path as on
// the SDK's: the next POST under its id is refused at once, however soon.
func TestCallerEndedSessionTakesNoFastCall(t *testing.T) {
	n := startHostile(t)
	for i := range 300 {
		rh := n.rawHTTPSession(t)
		rh.warm()
		req, _ := http.NewRequest(http.MethodDelete, rh.url, nil)
		req.Header.Set("Mcp-Session-Id", rh.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := rh.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		st, b, _ := rh.post(toolCall(9, "unruly__echo", map[string]any{"text": "after the end"}), nil)
		if st == http.StatusOK || strings.Contains(string(b), "after the end") {
			t.Fatalf("round %d: a call in an ended session was answered: %d %s", i, st, b)
		}
	}
}

// A session id that was never given, or one of another door's session, takes
// no call; the headers the SDK refuses are refused on a warm session too.
func TestCallerHeadersTheSDKRefuses(t *testing.T) {
	n := startHostile(t)
	rh := n.rawHTTPSession(t)
	rh.warm()
	body := toolCall(9, "unruly__echo", map[string]any{"text": "through"})
	for name, mod := range map[string]func(*http.Request){
		"unknown session":       func(r *http.Request) { r.Header.Set("Mcp-Session-Id", "no-such-session") },
		"Accept json only":      func(r *http.Request) { r.Header.Set("Accept", "application/json") },
		"Accept events only":    func(r *http.Request) { r.Header.Set("Accept", "text/event-stream") },
		"no Accept":             func(r *http.Request) { r.Header.Del("Accept") },
		"Content-Type text":     func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
		"no Content-Type":       func(r *http.Request) { r.Header.Del("Content-Type") },
		"protocol version":      func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "1999-01-01") },
		"protocol version junk": func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2025-06-18, 2025-03-26") },
		"per-request protocol":  func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "2026-07-28") },
		"GET":                   func(r *http.Request) { r.Method = http.MethodPut },
	} {
		st, b, _ := rh.post(body, mod)
		if st == http.StatusOK || strings.Contains(string(b), "through") {
			t.Errorf("%s: the call was answered: %d %s", name, st, b)
		}
	}
	// The session still works with the headers it should have.
	if st, b, _ := rh.post(body, nil); st != http.StatusOK || !strings.Contains(string(b), "through") {
		t.Errorf("the session afterwards: %d %s", st, b)
	}
}

// A caller's cancellation names its own calls only: another caller's
// notifications/cancelled under the same id ends nothing of the first one's.
func TestCallerCannotCancelAnotherSessionsCall(t *testing.T) {
	n := startHostile(t)
	a, b := n.rawStdio(t), n.rawStdio(t)
	a.send(toolCall(1, "unruly__echo", map[string]any{"text": "warm"}))
	a.response("1", 5*time.Second)
	a.send(toolCall(5, "hostile__slow", map[string]any{"sleep": 1, "tag": "A"}))
	time.Sleep(200 * time.Millisecond)
	for _, id := range []string{"5", `"5"`, `"oz0f-1"`, `"oz0f-2"`, "1", "2"} {
		b.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`)
	}
	if r := a.response("5", 5*time.Second); r.text() != "late A" {
		t.Errorf("the first caller's call after another's cancellations: %s", r.raw)
	}
	b.quiet(300 * time.Millisecond)
}

// A tools/call before initialize is refused on the stdio door, as the SDK
// refuses it: the fast path takes no call of a session that has not begun.
func TestCallerCallBeforeInitialize(t *testing.T) {
	n := startHostile(t)
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := &rawCaller{t: t, c: c, r: bufio.NewReader(c)}
	rc.send(toolCall(1, "unruly__echo", map[string]any{"text": "early"}))
	if r := rc.response("1", 5*time.Second); r.Error == nil || strings.Contains(string(r.raw), "early") {
		t.Errorf("a call before initialize was answered: %s", r.raw)
	}
}

// A body over the SDK's bound (mcp.DefaultMaxRequestBodyBytes, its guard
// against a caller exhausting the node's memory) is refused on a warm session
// too, not read whole and called.
func TestCallerBodyOverTheSDKsBound(t *testing.T) {
	n := startHostile(t)
	text := strings.Repeat("x", mcp.DefaultMaxRequestBodyBytes+1024)
	for _, warm := range []bool{false, true} {
		rh := n.rawHTTPSession(t)
		if warm {
			rh.warm()
		}
		st, b, _ := rh.post(toolCall(9, "unruly__echo", map[string]any{"text": text}), nil)
		if st != http.StatusRequestEntityTooLarge {
			t.Errorf("warm %v: a body of %d bytes: %d %.200s; want 413", warm, len(text), st, b)
		}
	}
}
