package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
)

// procPeakMB is a process's peak resident memory in MiB since it started or
// since resetPeak.
func procPeakMB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the node's status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.Fields(v)[0])
			return float64(kb) / 1024
		}
	}
	t.Fatalf("no VmHWM for pid %d", pid)
	return 0
}

// resetPeak starts a process's peak resident memory again from what it holds now.
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the node's peak memory: %v", err)
	}
}

// A remote server answering 50 MiB — in a JSON body, in an event stream
// answering the POST, on the SSE transport's stream — gets its call a "result
// too large" tool error and the finding a local server's would raise; the node's
// peak memory grows by far less than the reply (it reads no more of it than its
// bound), and each server's next call is answered.
func TestE2ERemoteRepliesOverTheBoundAreToolErrors(t *testing.T) {
	rs := startRemoteServers(t)
	n := startRemoteNode(t, rs)
	n.waitState("remote-mcp", "json", api.StateRunning)
	pid := n.cmd.Process.Pid // unshare and sh exec the node
	cs := n.mcpClient(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	call := func(tool string, args map[string]any) (string, bool) {
		t.Helper()
		out, isErr, err := callText(ctx, cs, &mcp.CallToolParams{Name: "remote-mcp__" + tool, Arguments: args})
		if err != nil {
			t.Fatalf("call %s: %v", tool, err)
		}
		return out, isErr
	}
	normal := map[string]string{"hello": "hello over streamable http", "json_hello": "hello in a JSON body", "ping": "pong over sse"}
	for tool, want := range normal {
		if out, isErr := call(tool, nil); isErr || out != want {
			t.Fatalf("%s: %v %q", tool, isErr, out)
		}
	}
	// Replies within the bound pass whole.
	if out, isErr := call("big_json", map[string]any{"mib": 2}); isErr || len(out) != 2<<20 {
		t.Fatalf("a 2 MiB JSON body: error %v, %d bytes", isErr, len(out))
	}
	time.Sleep(6 * time.Second) // the node hands the 2 MiB result's memory back
	base := procRSSMB(t, pid)
	resetPeak(t, pid)
	for _, c := range []struct{ big, next string }{{"big_json", "json_hello"}, {"big", "hello"}, {"big_sse", "ping"}} {
		start := time.Now()
		out, isErr := call(c.big, map[string]any{"mib": 50})
		took := time.Since(start)
		peak := procPeakMB(t, pid)
		t.Logf("%s (50 MiB): error %v %.200q in %v; node RSS %.1f MB before, peak %.1f MB", c.big, isErr, out, took, base, peak)
		if !isErr || !strings.Contains(out, "result too large: over 8 MiB") {
			t.Errorf("%s answered 50 MiB: error %v %.300q; want a 'result too large' tool error", c.big, isErr, out)
		}
		if peak-base > 40 {
			t.Errorf("%s: the node's peak memory grew %.1f MB over a 50 MiB reply (%.1f → %.1f): it read past its bound", c.big, peak-base, base, peak)
		}
		if out, isErr := call(c.next, nil); isErr || out != normal[c.next] {
			t.Errorf("%s after the reply over the bound: %v %q", c.next, isErr, out)
		}
	}
	for _, server := range []string{"json", "stream", "events"} {
		if !n.hasFinding(api.CodeResultTooLarge, "remote-mcp/"+server) {
			t.Errorf("no %s finding for remote-mcp/%s", api.CodeResultTooLarge, server)
		}
		if st := n.waitState("remote-mcp", server, api.StateRunning); st.Restarts != 0 {
			t.Errorf("remote-mcp/%s was restarted %d times", server, st.Restarts)
		}
	}
}
