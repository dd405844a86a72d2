package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// The node's own memory under what a careless plugin or caller does: a server
// offering far more tools than the node serves, and MCP sessions opened and never
// closed.

// startNode runs the node on d and waits until every server is running and, if
// tools, has its tools attached. It returns the node's pid; the node is stopped
// when the benchmark ends.
func startNode(b *testing.B, bin string, d datadir.Dir, tools bool, flags ...string) int {
	var log bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--data-dir", d.Root, "run", "--backend", "bwrap", "--log-format", "json"}, flags...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if st, err := api.NewClient(d.Control()).Status(context.Background()); err == nil {
			up := len(st.Plugins) > 0
			for _, p := range st.Plugins {
				for _, s := range p.Servers {
					up = up && s.State == api.StateRunning && (!tools || len(s.Tools) > 0)
				}
			}
			if up {
				return cmd.Process.Pid
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Fatalf("the node's servers did not come up:\n%s", log.String())
	return 0
}

// settledRSS is the node's RSS once start-up and attach garbage had time to go.
func settledRSS(pid int) float64 {
	time.Sleep(3 * time.Second)
	return float64(rssKB(pid)) / 1024
}

// BenchmarkNodeRSSTools10000: one sandboxed server offering 10,000 tools (the
// node serves the first 2000).
func BenchmarkNodeRSSTools10000(b *testing.B) {
	bwrapOrSkip(b)
	bin := nodeBinary(b)
	d, _ := testNode(b, "crowded", "crowded")
	// The fixture offers 2100; this one offers 10,000.
	dir := d.PluginCommit("crowded", fmt.Sprintf("%040x", 1))
	mj := filepath.Join(dir, ".mcp.json")
	data, err := os.ReadFile(mj)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(mj, bytes.Replace(data, []byte(`"2100"`), []byte(`"10000"`), 1), 0o644); err != nil {
		b.Fatal(err)
	}
	var mb float64
	for i := 0; i < b.N; i++ {
		pid := startNode(b, bin, d, true)
		mb = settledRSS(pid)
	}
	b.ReportMetric(mb, "node-RSS-MB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkNodeRSSSessions5000: 5,000 MCP sessions initialized and abandoned (no
// DELETE, no further request), within their idle timeout.
func BenchmarkNodeRSSSessions5000(b *testing.B) {
	bwrapOrSkip(b)
	bin := nodeBinary(b)
	d, _ := testNode(b, "demo", "demo")
	var mb float64
	open := 0
	for i := 0; i < b.N; i++ {
		pid := startNode(b, bin, d, false)
		sock := d.MCP()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", sock)
		}}}
		var ids []string
		for j := range 5000 {
			ids = append(ids, post(b, hc, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"abandoner","version":"1"}}}`, j)))
		}
		hc.CloseIdleConnections()
		mb = settledRSS(pid)
		// How many the node still holds: those that answer a ping.
		open = 0
		for _, id := range ids {
			if ping(hc, id) {
				open++
			}
		}
		hc.CloseIdleConnections()
	}
	b.ReportMetric(mb, "node-RSS-MB")
	b.ReportMetric(float64(open), "sessions-open")
	b.ReportMetric(0, "ns/op")
}

// ping sends a session a ping and says whether it answered.
func ping(c *http.Client, session string) bool {
	req, _ := http.NewRequest("POST", "http://node/", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// BenchmarkNodeRSSConnections20000: one local user opens 19,000 connections to
// --mcp-listen and holds them (the fault battery's flood, which drove the node
// to its open-file limit): the node's RSS and the descriptors it holds.
func BenchmarkNodeRSSConnections20000(b *testing.B) {
	bwrapOrSkip(b)
	bin := nodeBinary(b)
	d, _ := testNode(b, "demo", "demo")
	var mb, fds, limit float64
	for i := 0; i < b.N; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		pid := startNode(b, bin, d, false, "--mcp-listen", addr)
		var held []net.Conn
		for range 19000 {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			held = append(held, c)
		}
		// What the node holds at the flood's end (the idle ones go after the
		// server's 10 s header timeout).
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		fds = float64(len(ents))
		mb = settledRSS(pid)
		limit = float64(nofile(pid))
		for _, c := range held {
			c.Close()
		}
	}
	b.ReportMetric(mb, "node-RSS-MB")
	b.ReportMetric(fds, "node-fds")
	b.ReportMetric(limit, "fd-limit")
	b.ReportMetric(0, "ns/op")
}

// nofile is a process's open-file limit.
func nofile(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max open files")); strings.HasPrefix(line, "Max open files") && len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}

// post sends one JSON-RPC message to the node's MCP socket and returns the
// session it answered for.
func post(b *testing.B, c *http.Client, session, body string) string {
	req, _ := http.NewRequest("POST", "http://node/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatalf("POST: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		b.Fatalf("initialize: %s, session %q", resp.Status, resp.Header.Get("Mcp-Session-Id"))
	}
	return resp.Header.Get("Mcp-Session-Id")
}
