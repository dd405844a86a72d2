package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"oz0.ai/node/node/gateway"
)

// A line over the limit is consumed whole and reported; the next line reads afresh,
// whatever the reader's buffer size.
func TestReadLineSkipsAnOverlongLine(t *testing.T) {
	in := strings.Repeat("x", 100) + "\n" + "ok\n" + "tail"
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	if _, err := readLine(r, 50); !errors.Is(err, errLineTooLong) {
		t.Fatalf("overlong line: err %v", err)
	}
	if l, err := readLine(r, 50); err != nil || string(l) != "ok" {
		t.Fatalf("next line %q %v", l, err)
	}
	if l, err := readLine(r, 50); !errors.Is(err, io.EOF) || string(l) != "tail" {
		t.Fatalf("last line %q %v", l, err)
	}
}

// The bridge's client side answers bad lines and hands on the good ones.
func TestStdioConnAnswersBadLines(t *testing.T) {
	in := "not json\n\n" + `{"jsonrpc":"2.0","id":"a","method":7}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n"
	var out bytes.Buffer
	c := newStdioConn(strings.NewReader(in), &out)
	msg, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "ping" {
		t.Fatalf("message %#v", msg)
	}
	want := `{"error":{"code":-32700,"message":"parse error: the line is not JSON"},"id":null,"jsonrpc":"2.0"}` + "\n" +
		`{"error":{"code":-32600,"message":"invalid request: `
	if !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), `"id":"a"`) {
		t.Errorf("answers:\n%s", out.String())
	}
	if _, err := c.Read(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("end of input: %v", err)
	}
}

// --agent-hooks adds the capability to the client's initialize request, keeping
// what the client declared; other messages pass as they are.
func TestMarkAgentHooks(t *testing.T) {
	id, _ := jsonrpc.MakeID(float64(1))
	in := &jsonrpc.Request{ID: id, Method: "initialize", Params: json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true},"experimental":{"x":{}}},"clientInfo":{"name":"claude-code","version":"2"}}`)}
	out := markAgentHooks(in).(*jsonrpc.Request)
	var p struct {
		Capabilities struct {
			Roots        map[string]any `json:"roots"`
			Experimental map[string]any `json:"experimental"`
		} `json:"capabilities"`
		ClientInfo map[string]any `json:"clientInfo"`
	}
	if err := json.Unmarshal(out.Params, &p); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Capabilities.Experimental[gateway.AgentHooksCapability]; !ok || p.Capabilities.Experimental["x"] == nil || p.Capabilities.Roots["listChanged"] != true || p.ClientInfo["name"] != "claude-code" {
		t.Errorf("initialize after marking: %s", out.Params)
	}
	if string(in.Params) == string(out.Params) {
		t.Error("the request was changed in place or not at all")
	}
	call := &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)}
	if markAgentHooks(call) != call {
		t.Error("a tools/call was changed")
	}
}
