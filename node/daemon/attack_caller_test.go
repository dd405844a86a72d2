package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawHTTP is a caller on the Streamable HTTP door that writes its requests
// itself.
type rawHTTP struct {
	t   *testing.T
	hc  *http.Client
	url string
	sid string
}

func (n *node) rawHTTPSession(t *testing.T) *rawHTTP {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", n.d.MCP())
	}}}
	return newRawHTTP(t, hc, "http://node/mcp", nil)
}

func newRawHTTP(t *testing.T, hc *http.Client, url string, mod func(*http.Request)) *rawHTTP {
	t.Helper()
	rh := &rawHTTP{t: t, hc: hc, url: url}
	st, _, h := rh.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, mod)
	if st != http.StatusOK || h.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %v", st, h)
	}
	rh.sid = h.Get("Mcp-Session-Id")
	if st, b, _ := rh.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, mod); st != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", st, b)
	}
	return rh
}

// post sends one body with the headers the SDK asks for (mod may change them).
func (rh *rawHTTP) post(body string, mod func(*http.Request)) (int, []byte, http.Header) {
	rh.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rh.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if rh.sid != "" {
		req.Header.Set("Mcp-Session-Id", rh.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	if mod != nil {
		mod(req)
	}
	resp, err := rh.hc.Do(req)
	if err != nil {
		rh.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// warm makes the session's next calls take the fast path: its first call goes
// through the SDK.
func (rh *rawHTTP) warm() {
	rh.t.Helper()
	if st, b, _ := rh.post(toolCall("warm", "unruly__echo", map[string]any{"text": "warm"}), nil); st != http.StatusOK || !bytes.Contains(b, []byte(`"warm"`)) {
		rh.t.Fatalf("warm call: %d %s", st, b)
	}
}

// outcome is what a caller can tell of an answer, path aside.
func outcome(st int, b []byte) string {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Sprintf("%d %q", st, strings.TrimSpace(string(b)))
	}
	out := fmt.Sprintf("%d id=%v", st, m["id"])
	if e, ok := m["error"].(map[string]any); ok {
		out += fmt.Sprintf(" error=%v", e["code"])
	}
	if r, ok := m["result"].(map[string]any); ok {
		rb, _ := json.Marshal(r["content"])
		out += fmt.Sprintf(" isError=%v content=%s", r["isError"], rb)
	}
	return out
}

// Every request a caller may shape oddly is answered on the fast path as the
// SDK's path answers it: the same message through a session's first call (the
// SDK's) and through a later one (the fast path's, where it takes it).
func TestCallerOddRequestsAnsweredAsTheSDKAnswers(t *testing.T) {
	n := startHostile(t)
	call := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`
	}
	echo := `{"name":"unruly__echo","arguments":{"text":"x"}}`
	cases := map[string]string{
		"duplicate name":          call("5", `{"name":"hostile__forge","name":"unruly__echo","arguments":{"text":"dup"}}`),
		"duplicate name reversed": call("5", `{"name":"unruly__echo","name":"hostile__forge","arguments":{}}`),
		"escaped name key":        call("5", `{"n\u0061me":"unruly__echo","arguments":{"text":"esc"}}`),
		"Name":                    call("5", `{"Name":"unruly__echo","arguments":{"text":"x"}}`),
		"NAME and name":           call("5", `{"NAME":"hostile__forge","name":"unruly__echo","arguments":{"text":"x"}}`),
		"Arguments":               call("5", `{"name":"unruly__echo","Arguments":{"text":"case"}}`),
		"METHOD":                  `{"jsonrpc":"2.0","id":5,"METHOD":"tools/call","params":` + echo + `}`,
		"method twice, list last": `{"jsonrpc":"2.0","id":5,"method":"tools/call","method":"tools/list","params":` + echo + `}`,
		"method twice, call last": `{"jsonrpc":"2.0","id":5,"method":"tools/list","method":"tools/call","params":` + echo + `}`,
		"escaped method":          `{"jsonrpc":"2.0","id":5,"method":"tools\/call","params":` + echo + `}`,
		"no version":              `{"id":5,"method":"tools/call","params":` + echo + `}`,
		"arguments number":        call("5", `{"name":"unruly__echo","arguments":5}`),
		"arguments string":        call("5", `{"name":"unruly__echo","arguments":"text"}`),
		"arguments array":         call("5", `{"name":"unruly__echo","arguments":[1]}`),
		"arguments null":          call("5", `{"name":"unruly__echo","arguments":null}`),
		"params array":            call("5", `["unruly__echo"]`),
		"params null":             call("5", `null`),
		"meta token object":       call("5", `{"name":"unruly__echo","arguments":{"text":"x"},"_meta":{"progressToken":{"a":1}}}`),
		"meta token null":         call("5", `{"name":"unruly__echo","arguments":{"text":"x"},"_meta":{"progressToken":null}}`),
		"meta not object":         call("5", `{"name":"unruly__echo","arguments":{"text":"x"},"_meta":"x"}`),
		"id null":                 call("null", echo),
		"id float":                call("1.5", echo),
		"id huge":                 call("100000000000000000000000000000", echo),
		"id negative":             call("-9223372036854775808", echo),
		"id object":               call(`{"a":1}`, echo),
		"id bool":                 call("true", echo),
		"id fast form":            call(`"oz0f-1"`, echo),
		"id empty string":         call(`""`, echo),
		"unknown tool":            call("5", `{"name":"nobody__echo","arguments":{}}`),
		"server's own name":       call("5", `{"name":"echo","arguments":{"text":"x"}}`),
		"two messages":            call("5", echo) + call("6", echo),
		"two lines":               call("5", echo) + "\n" + call("6", echo),
		"batch":                   "[" + call("5", echo) + "]",
		"trailing garbage":        call("5", echo) + "x",
		"deep":                    call("5", `{"name":"unruly__echo","arguments":{"x":`+strings.Repeat("[", 2000)+strings.Repeat("]", 2000)+`}}`),
	}
	for name, body := range cases {
		sdk := n.rawHTTPSession(t)
		fast := n.rawHTTPSession(t)
		fast.warm()
		st, b, _ := sdk.post(body, nil)
		want := outcome(st, b)
		st, b, _ = fast.post(body, nil)
		got := outcome(st, b)
		if got != want {
			t.Errorf("%s: the fast path answered %s; the SDK's path %s", name, got, want)
		} else {
			t.Logf("%s: %s", name, got)
		}
	}
}

// A call whose _meta carries the protocol's own keys (a per-request protocol
// version, client info, capabilities) is refused where the SDK refuses it: on
// the HTTP door (stateful, which refuses every per-request version) and, on the
// stdio door, for an unsupported version or client info or capabilities that do
// not decode. A well-formed one still takes the stdio door's fast path.
func TestCallerProtocolMetaIsTheSDKsToCheck(t *testing.T) {
	n := startHostile(t)
	call := func(tool, meta string) string {
		return `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"text":"x"},"_meta":` + meta + `}}`
	}
	const v, caps = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, `"io.modelcontextprotocol/clientCapabilities":{}`
	for _, c := range []struct {
		name, meta string
		refused    bool // on the stdio door
	}{
		{"unsupported version", `{"io.modelcontextprotocol/protocolVersion":"2099-01-01",` + caps + `}`, true},
		{"bad client info", `{` + v + `,"io.modelcontextprotocol/clientInfo":7,` + caps + `}`, true},
		{"null client info", `{` + v + `,"io.modelcontextprotocol/clientInfo":null,` + caps + `}`, true},
		{"client info of the wrong shape", `{` + v + `,"io.modelcontextprotocol/clientInfo":{"name":7},` + caps + `}`, true},
		{"no capabilities", `{` + v + `}`, true},
		{"null capabilities", `{` + v + `,"io.modelcontextprotocol/clientCapabilities":null}`, true},
		{"capabilities a string", `{` + v + `,"io.modelcontextprotocol/clientCapabilities":"all"}`, true},
		{"roots of the wrong shape", `{` + v + `,"io.modelcontextprotocol/clientCapabilities":{"roots":7}}`, true},
		{"version a number", `{"io.modelcontextprotocol/protocolVersion":20260728}`, false},
		{"old version", `{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}`, false},
		{"well formed", `{` + v + `,"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}}}`, false},
	} {
		body := call("unruly__echo", c.meta)
		sdk := n.rawHTTPSession(t)
		fast := n.rawHTTPSession(t)
		fast.warm()
		st, b, _ := sdk.post(body, nil)
		want := outcome(st, b)
		st, b, _ = fast.post(body, nil)
		if got := outcome(st, b); got != want {
			t.Errorf("http, %s: the fast path answered %s; the SDK's path %s", c.name, got, want)
		}
		rc := n.rawStdio(t)
		rc.send(toolCall(1, "unruly__echo", map[string]any{"text": "warm"}))
		rc.response("1", 5*time.Second)
		rc.send(body)
		if r := rc.response("5", 5*time.Second); (r.Error != nil) != c.refused {
			t.Errorf("stdio, %s: answered %s; want refused %v", c.name, r.raw, c.refused)
		}
		if c.refused {
			continue
		}
		rc.send(call("unruly__request", c.meta))
		r := rc.response("5", 5*time.Second)
		var got seenRequest
		if err := json.Unmarshal([]byte(r.text()), &got); err != nil {
			t.Fatalf("stdio, %s: %s", c.name, r.raw)
		}
		if id, ok := got.ID.(string); !ok || !strings.HasPrefix(id, "oz0f-") {
			t.Errorf("stdio, %s: the call did not take the fast path (the server saw id %v)", c.name, got.ID)
		}
	}
}
