package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/mcpdoor"
)

// cpuNanos is the CPU time a process's threads have run, in nanoseconds (the
// scheduler's own count, finer than rusage's ticks).
func cpuNanos(t *testing.T, pid int) int64 {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		t.Skipf("not tested: the scheduler's CPU count is not readable here: %v", err)
	}
	var sum int64
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that just ended
		}
		v, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// bridgeCPU makes calls through a bridge started with args, 8 callers at once,
// and returns the CPU time the bridge process spent on them.
func bridgeCPU(t *testing.T, n *e2eNode, calls int, args ...string) time.Duration {
	cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data, "mcp"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 1, "b": 2}})
		if err != nil || res.IsError {
			t.Errorf("demo__add: %v %+v", err, res)
		}
	}
	for range 20 {
		call()
	}
	before := cpuNanos(t, cmd.Process.Pid)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range calls / 8 {
				call()
			}
		})
	}
	wg.Wait()
	return time.Duration(cpuNanos(t, cmd.Process.Pid) - before)
}

// The bridge hands its pipes to the node and copies nothing itself: over a
// thousand calls it spends next to no CPU, where the relay it falls back to
// spends some on every call.
func TestE2EStdioBridgeHandsOffItsPipes(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.waitState("demo", "main", api.StateRunning)
	const calls = 1000
	handed := bridgeCPU(t, n, calls)
	relayed := bridgeCPU(t, n, calls, "--relay")
	t.Logf("bridge CPU over %d calls: %v handed off, %v relaying", calls, handed, relayed)
	if handed > 5*time.Millisecond {
		t.Errorf("the bridge spent %v over %d calls: it relays them (the relay spent %v)", handed, calls, relayed)
	}
	if relayed <= handed {
		t.Errorf("the relay spent %v, the handed-off bridge %v: the measure tells nothing", relayed, handed)
	}
}

// The client closing the bridge's input ends the session: the bridge exits 0
// and its output ends, handed off or relaying, with --agent-hooks or not.
func TestE2EStdioBridgeExitsWhenItsClientCloses(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.waitState("demo", "main", api.StateRunning)
	for _, args := range [][]string{nil, {"--agent-hooks"}, {"--relay"}} {
		t.Run(strings.Join(append([]string{"mcp"}, args...), " "), func(t *testing.T) {
			cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data, "mcp"}, args...)...)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			exited := make(chan struct{})
			go func() { done <- cmd.Wait(); close(exited) }()
			defer func() {
				select {
				case <-exited:
				default:
					cmd.Process.Kill()
					<-exited
				}
			}()
			io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`+"\n")
			r := bufio.NewReader(out)
			line, err := r.ReadString('\n')
			if err != nil || !strings.Contains(line, `"result"`) {
				t.Fatalf("initialize: %v %q", err, line)
			}
			// The client sees its child alive while the session lasts.
			select {
			case err := <-done:
				t.Fatalf("the bridge exited during its session: %v %s", err, stderr.String())
			case <-time.After(200 * time.Millisecond):
			}
			in.Close()
			rest := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, r); rest <- err }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("the bridge after its client closed its input: %v %s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the bridge did not exit after its client closed its input")
			}
			select {
			case <-rest:
			case <-time.After(10 * time.Second):
				t.Error("the bridge's output did not end")
			}
		})
	}
}

// A node that refuses the pipes (here one that does not know the handoff and
// answers it with an error, as an older node does) is relayed to on a new
// connection: the client is served, and its end of input ends the bridge cleanly.
func TestE2EStdioBridgeRelaysWhenTheNodeRefuses(t *testing.T) {
	bin := buildBinary(t)
	d, err := datadir.New(filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d.Run(), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", d.MCPStdio())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	firsts := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				first := true
				for sc.Scan() {
					if first {
						firsts <- sc.Text()
						first = false
					}
					var m struct {
						ID json.RawMessage `json:"id"`
					}
					json.Unmarshal(sc.Bytes(), &m)
					if sc.Text() == mcpdoor.HandoffRequest {
						io.WriteString(c, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32601,"message":"no such method"}}`+"\n")
						continue
					}
					io.WriteString(c, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"served":true}}`+"\n")
				}
			}()
		}
	}()
	cmd := exec.Command(bin, "--data-dir", d.Root, "mcp")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	io.WriteString(in, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`+"\n")
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, `"served":true`) {
		t.Errorf("through the relay: %v %q %s", err, line, stderr.String())
	}
	in.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the relaying bridge after its client closed its input: %v %s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the relaying bridge did not exit")
	}
	if got := []string{<-firsts, <-firsts}; got[0] != mcpdoor.HandoffRequest || got[1] != `{"jsonrpc":"2.0","id":7,"method":"tools/list"}` {
		t.Errorf("the node's connections began with %q; want the handoff, then the client's first line on a new one", got)
	}
}
