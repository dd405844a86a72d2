// Package progresscheck is the tests' one check that a call's progress reaches
// its caller before the call's answer and never after it, read as raw JSON-RPC
// lines of the stdio framing.
package progresscheck

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// InOrder makes calls of tool one by one, each with a progress token and a
// message its server sends back as progress before answering ("tN", "mN"); send
// writes one line to the node, next reads the node's next line (nil when none
// came within the limit). It fails for each call answered before its progress,
// and for anything sent after the last answer.
func InOrder(t testing.TB, send func(string), next func(time.Duration) []byte, tool string, calls int) {
	t.Helper()
	late := 0
	for i := range calls {
		n := strconv.Itoa(i)
		send(`{"jsonrpc":"2.0","id":` + n + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"message":"m` + n + `"},"_meta":{"progressToken":"t` + n + `"}}}`)
		progressed := false
		for {
			b := next(10 * time.Second)
			if b == nil {
				t.Fatalf("call %d: no answer", i)
			}
			var m struct {
				ID     *int   `json:"id"`
				Method string `json:"method"`
				Params struct {
					ProgressToken string `json:"progressToken"`
					Message       string `json:"message"`
				} `json:"params"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("call %d: %q: %v", i, b, err)
			}
			if m.Method == "notifications/progress" {
				if m.Params.ProgressToken != "t"+n || m.Params.Message != "m"+n {
					t.Errorf("call %d got progress %s", i, b)
				}
				progressed = true
				continue
			}
			if m.ID == nil || *m.ID != i {
				t.Fatalf("call %d: unexpected line %s", i, b)
			}
			break
		}
		if !progressed {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d calls answered before the progress their server sent first", late, calls)
	}
	if b := next(500 * time.Millisecond); b != nil {
		t.Errorf("after the last answer the caller got %s", b)
	}
}
