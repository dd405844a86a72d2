package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A caller's arguments reach the server inside the one line of its call: line
// breaks between their tokens (JSON whitespace, which an HTTP body may hold and
// a stdio line may hold as carriage returns) would end the call's line in the
// server's reader and make what follows a message of the caller's own making,
// here a call of a tool the server does not list and the gateway never offers.
func TestCallerCannotSmuggleAMessageToAServer(t *testing.T) {
	n := startHostile(t)
	smuggled := `{"jsonrpc":"2.0","id":4242,"method":"tools/call","params":{"name":"unlisted","arguments":{"via":"%s"}}}`
	mark := filepath.Join(n.d.Home("hostile"), "unlisted-called")
	args := func(brk, via string) string {
		return `{"a":` + brk + strings.Replace(smuggled, "%s", via, 1) + brk + `}`
	}
	call := func(id, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"hostile__forge","arguments":` + args + `}}`
	}
	// Through the HTTP door: a session's first call takes the SDK's path, a later
	// one the fast path. A carrier whose line was cut is never answered: the
	// caller gives up on it.
	var lost []string
	for _, brk := range []string{"\n", "\r", "\r\n"} {
		rh := n.rawHTTPSession(t)
		rh.hc.Timeout = 3 * time.Second
		for _, via := range []string{"http-sdk", "http-fast"} {
			req, _ := http.NewRequest(http.MethodPost, rh.url, strings.NewReader(call("5", args(brk, via))))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", rh.sid)
			resp, err := rh.hc.Do(req)
			if err != nil {
				lost = append(lost, fmt.Sprintf("%s %q: %v", via, brk, err))
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), `"own"`) {
				lost = append(lost, fmt.Sprintf("%s %q: %d %s", via, brk, resp.StatusCode, b))
			}
		}
	}
	// Through the stdio door, where a line holds no newline but may hold a
	// carriage return.
	rc := n.rawStdio(t)
	rc.send(call("6", args("\r", "stdio")))
	if b := rc.line(3 * time.Second); !strings.Contains(string(b), `"own"`) {
		lost = append(lost, fmt.Sprintf("stdio: %q", b))
	}
	if len(lost) > 0 {
		t.Errorf("carrier calls not answered:\n%s", strings.Join(lost, "\n"))
	}
	time.Sleep(300 * time.Millisecond)
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("the server ran a call no caller could make through the gateway:\n%s", b)
	}
}
