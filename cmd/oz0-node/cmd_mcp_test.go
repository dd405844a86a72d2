package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/mcpdoor"
)

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
// answer before the next request; with --agent-hooks it first tells the node that
// the whole connection forwards its hooks, and passes every line of the client's
// untouched; the client's end of input ends the bridge cleanly after the node's
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
	go func() { done <- pump(context.Background(), node, inR, outW, true) }()
	const first = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}`
	const second = `{"method":"tools/list","jsonrpc":"2.0","id":2,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	io.WriteString(inW, first+"\n")
	io.WriteString(inW, second+"\n")
	out := bufio.NewScanner(outR)
	for _, want := range []string{`"id":2`, `"id":1`} {
		if !out.Scan() || !strings.Contains(out.Text(), want) {
			t.Fatalf("answer %s: %q", want, out.Text())
		}
	}
	for _, want := range []string{mcpdoor.AgentHooksPreamble, first, second} {
		if got := <-seen; got != want {
			t.Errorf("the node got %s; want %s", got, want)
		}
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
	err := pump(context.Background(), node, inR, io.Discard, false)
	if err == nil || !strings.Contains(err.Error(), "node ended the session") {
		t.Errorf("pump after the node left: %v", err)
	}
}
