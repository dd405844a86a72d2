package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// rawCaller is a caller on the stdio door that writes and reads JSON lines
// itself, to see exactly what the node sends it.
type rawCaller struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (n *node) rawStdio(t *testing.T) *rawCaller {
	t.Helper()
	c, err := net.Dial("unix", n.d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawCaller{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
	rc.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	rc.response(`"init"`, 5*time.Second)
	rc.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return rc
}

func (rc *rawCaller) send(line string) {
	rc.t.Helper()
	if _, err := rc.c.Write([]byte(line + "\n")); err != nil {
		rc.t.Fatal(err)
	}
}

// line reads the next line the node sends, or nil when none came within limit.
func (rc *rawCaller) line(limit time.Duration) []byte {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(limit))
	b, err := rc.r.ReadBytes('\n')
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() && len(b) == 0 {
			return nil
		}
		rc.t.Fatalf("read from the stdio door: %v (%q)", err, b)
	}
	return b
}

// rawResponse is a response as a caller decodes it.
type rawResponse struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Method string `json:"method"`
	raw    []byte
}

func (r rawResponse) text() string {
	if r.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range r.Result.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// response reads lines until the response whose id is id (raw JSON), failing on
// any other response; notifications are skipped.
func (rc *rawCaller) response(id string, limit time.Duration) rawResponse {
	rc.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b := rc.line(time.Until(deadline))
		if b == nil {
			break
		}
		var r rawResponse
		if err := json.Unmarshal(b, &r); err != nil {
			rc.t.Fatalf("the node sent a line that is no JSON: %q: %v", b, err)
		}
		r.raw = b
		if r.Method != "" {
			continue
		}
		if string(r.ID) != id {
			rc.t.Fatalf("waiting for the answer to %s, the node sent one to %s: %s", id, r.ID, b)
		}
		return r
	}
	rc.t.Fatalf("no answer to %s within %v", id, limit)
	return rawResponse{}
}

// quiet fails if the node sends the caller any response within limit.
func (rc *rawCaller) quiet(limit time.Duration) {
	rc.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b := rc.line(time.Until(deadline))
		if b == nil {
			return
		}
		if !bytes.Contains(b, []byte(`"method"`)) {
			rc.t.Errorf("the node sent an answer no call is waiting for: %s", b)
		}
	}
}

func toolCall(id any, tool string, args any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	return string(b)
}

func startHostile(t *testing.T) *node {
	n := start(t, policy.Off, 1, nil, "unruly", "hostile")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	n.waitState(t, "hostile", "main", api.StateUnsandboxed)
	return n
}

// A server that answers under every id it may guess (the node's fast ids, the
// SDK's numbers, the caller's own id) answers only its own call: another
// server's call in flight gets that server's answer, and the caller gets no
// answer it did not ask for.
func TestHostileServerAnswersOnlyItsOwnCall(t *testing.T) {
	n := startHostile(t)
	rc := n.rawStdio(t)
	rc.send(toolCall(1, "unruly__echo", map[string]any{"text": "warm"})) // unruly's first fast call
	if r := rc.response("1", 5*time.Second); r.text() != "warm" {
		t.Fatalf("unruly__echo: %s", r.raw)
	}
	var ids []any
	for i := range 40 {
		ids = append(ids, "oz0f-"+itoa(i), i, itoa(i), float64(i)+0.5)
	}
	ids = append(ids, 7, "7", nil)
	// unruly's call of 1.5 s is in flight while hostile sprays its answers.
	rc.send(toolCall(7, "unruly__big", map[string]any{"mib": 0, "sleep": 1.5}))
	time.Sleep(300 * time.Millisecond)
	rc.send(toolCall(8, "hostile__forge", map[string]any{"ids": ids}))
	if r := rc.response("8", 5*time.Second); r.text() != "own" {
		t.Errorf("hostile__forge: %s", r.raw)
	}
	if r := rc.response("7", 5*time.Second); r.Result == nil || r.text() != "" || r.Result.IsError {
		t.Errorf("unruly's call was answered with %s; want its own empty result", r.raw)
	}
	rc.quiet(500 * time.Millisecond)
	rc.send(toolCall(9, "unruly__echo", map[string]any{"text": "after"}))
	if r := rc.response("9", 5*time.Second); r.text() != "after" {
		t.Errorf("unruly__echo after the spray: %s", r.raw)
	}
}

// Duplicate and escaped keys in a server's answer are read as the SDK reads
// them (the last key counts; escapes are decoded), and never give a server
// another call's answer.
func TestHostileServerDuplicateKeys(t *testing.T) {
	n := startHostile(t)
	rc := n.rawStdio(t)
	for i, c := range []struct {
		args    map[string]any
		want    string
		isError bool
	}{
		{map[string]any{"kind": "result"}, "second", false},
		{map[string]any{"kind": "id", "other": "oz0f-999"}, "own", false},
		{map[string]any{"kind": "escaped"}, "own", false},
		{map[string]any{"kind": "error"}, "", true},
	} {
		id := 100 + i
		rc.send(toolCall(id, "hostile__dup", c.args))
		r := rc.response(itoa(id), 5*time.Second)
		if r.Result == nil || r.Result.IsError != c.isError || (c.want != "" && r.text() != c.want) {
			t.Errorf("hostile__dup %v: %s; want %q (error %v)", c.args, r.raw, c.want, c.isError)
		}
	}
	// An answer whose last id is another call's leaves its own call unanswered
	// until the caller gives up; the other call is not answered by it.
	rc.send(toolCall(200, "unruly__big", map[string]any{"mib": 0, "sleep": 1}))
	time.Sleep(200 * time.Millisecond)
	rc.send(toolCall(201, "hostile__dup", map[string]any{"kind": "id", "other": "oz0f-1"}))
	if r := rc.response("201", 5*time.Second); r.text() != "own" {
		t.Errorf("hostile__dup id: %s", r.raw)
	}
	if r := rc.response("200", 5*time.Second); r.Result == nil || r.text() != "" {
		t.Errorf("unruly's call: %s", r.raw)
	}
	rc.quiet(300 * time.Millisecond)
}

// A result that is not an object is answered as a tool error, as the SDK's path
// answers it; one nested past the bound is never read (its call is the
// caller's to give up) and the node goes on.
func TestHostileServerResultShapes(t *testing.T) {
	n := startHostile(t)
	rc := n.rawStdio(t)
	for i, raw := range []string{`[]`, `"text"`, `null`, `1`, `true`, `[{"content":[]}]`} {
		id := 300 + i
		rc.send(toolCall(id, "hostile__shape", map[string]any{"raw": raw}))
		r := rc.response(itoa(id), 5*time.Second)
		if r.Result == nil || !r.Result.IsError {
			t.Errorf("a result %s was answered with %s; want a tool error", raw, r.raw)
		}
	}
	rc.send(toolCall(400, "hostile__deep", map[string]any{"depth": 5000}))
	rc.quiet(time.Second)
	rc.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":400}}`)
	rc.send(toolCall(401, "hostile__deep", map[string]any{"depth": 500}))
	if r := rc.response("401", 5*time.Second); r.Result == nil || r.Result.IsError {
		t.Errorf("a result 500 deep: %.200s", r.raw)
	}
	rc.send(toolCall(402, "hostile__forge", map[string]any{}))
	if r := rc.response("402", 5*time.Second); r.text() != "own" {
		t.Errorf("the next call: %s", r.raw)
	}
}

// An answer that comes after its call was cancelled is dropped: the server's
// next call gets its own answer, not the late one.
func TestHostileServerLateAnswer(t *testing.T) {
	n := startHostile(t)
	cs := n.stdioClientWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hostile__slow", Arguments: map[string]any{"sleep": 1, "tag": "A"}}); err == nil {
		t.Fatal("the slow call answered before it was cancelled")
	}
	if out, isErr := call(t, cs, "hostile__slow", map[string]any{"sleep": 0, "tag": "B"}); isErr || out != "late B" {
		t.Errorf("the call after a cancelled one: %q (error %v)", out, isErr)
	}
}

// Progress a server sends under another server's call's token reaches no one.
func TestHostileServerProgressUnderAnotherServersToken(t *testing.T) {
	n := startHostile(t)
	got := make(chan *mcp.ProgressNotificationParams, 8)
	cs := n.stdioClientWith(t, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		got <- r.Params
	}})
	victim := fastRequest(t, cs, mcp.Meta{"progressToken": "victim"})
	var tok string
	json.Unmarshal(victim.Params.Meta["progressToken"], &tok)
	if !strings.HasPrefix(tok, "oz0-") {
		t.Fatalf("unruly got token %q", tok)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "hostile__progress", Arguments: map[string]any{"token": tok},
		Meta: mcp.Meta{"progressToken": "hostile-call"}})
	if err != nil || res.IsError {
		t.Fatalf("hostile__progress: %v %+v", err, res)
	}
	select {
	case p := <-got:
		t.Errorf("progress under unruly's token reached the caller: %+v", p)
	case <-time.After(time.Second):
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
