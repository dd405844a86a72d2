package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"oz0.ai/node/node/gateway"
)

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
	// A client of the sessionless protocol declares its capabilities in _meta.
	disc := &jsonrpc.Request{ID: id, Method: "server/discover", Params: json.RawMessage(`{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`)}
	var m struct {
		Meta struct {
			Caps struct {
				Roots        map[string]any `json:"roots"`
				Experimental map[string]any `json:"experimental"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(markAgentHooks(disc).(*jsonrpc.Request).Params, &m); err != nil {
		t.Fatal(err)
	}
	if c := m.Meta.Caps; c.Experimental[gateway.AgentHooksCapability] == nil || c.Roots["listChanged"] != true {
		t.Errorf("server/discover after marking: %+v", m)
	}
}

// fakeNodeSocket accepts one connection on a unix socket and hands it to serve.
func fakeNodeSocket(t *testing.T, serve func(net.Conn)) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			serve(c)
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

// The bridge passes every line on as it comes, both ways, without waiting for an
// answer before the next request; with --agent-hooks only the initialize request
// is edited; the client's end of input ends the bridge cleanly after the node's
// last answers.
func TestPumpRelaysLinesBothWaysAtOnce(t *testing.T) {
	seen := make(chan string, 8)
	node := fakeNodeSocket(t, func(c net.Conn) {
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			seen <- sc.Text()
			// Answer only after the second request arrived: a bridge that waits
			// for each answer before sending on would hang here.
			if strings.Contains(sc.Text(), `"id":2`) {
				io.WriteString(c, `{"jsonrpc":"2.0","id":2,"result":{}}`+"\n"+`{"jsonrpc":"2.0","id":1,"result":{}}`+"\n")
			}
		}
		io.WriteString(c, `{"jsonrpc":"2.0","method":"bye"}`+"\n")
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- pump(context.Background(), node, inR, outW, markAgentHooks) }()
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}`+"\n")
	io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"capabilities":{}}}`+"\n")
	out := bufio.NewScanner(outR)
	for _, want := range []string{`"id":2`, `"id":1`} {
		if !out.Scan() || !strings.Contains(out.Text(), want) {
			t.Fatalf("answer %s: %q", want, out.Text())
		}
	}
	if first := <-seen; !strings.Contains(first, gateway.AgentHooksCapability) {
		t.Errorf("initialize not marked: %s", first)
	}
	if second := <-seen; strings.Contains(second, gateway.AgentHooksCapability) {
		t.Errorf("a later request was edited: %s", second)
	}
	inW.Close()
	if !out.Scan() || !strings.Contains(out.Text(), "bye") {
		t.Errorf("the node's last message was lost: %q", out.Text())
	}
	if err := <-done; err != nil {
		t.Errorf("end of input: %v", err)
	}
}

// A node that goes away ends the bridge with an error saying so.
func TestPumpEndsWhenTheNodeDoes(t *testing.T) {
	node := fakeNodeSocket(t, func(c net.Conn) { c.Close() })
	inR, _ := io.Pipe()
	err := pump(context.Background(), node, inR, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "node ended the session") {
		t.Errorf("pump after the node left: %v", err)
	}
}
