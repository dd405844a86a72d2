package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/internal/otlptest"
	"oz0.ai/node/node/api"
)

// writeTenantFile writes a tenant file before the node starts.
func (n *e2eNode) writeTenantFile(name, content string, mode os.FileMode) {
	n.t.Helper()
	os.MkdirAll(filepath.Join(n.data, "tenant"), 0o711)
	if err := os.WriteFile(filepath.Join(n.data, "tenant", name), []byte(content), mode); err != nil {
		n.t.Fatal(err)
	}
}

// auditLines reads the node's audit stream.
func (n *e2eNode) auditLines() []api.AuditRecord {
	b, _ := os.ReadFile(filepath.Join(n.data, "logs", "audit.jsonl"))
	var out []api.AuditRecord
	for _, l := range strings.Split(string(b), "\n") {
		var r api.AuditRecord
		if json.Unmarshal([]byte(l), &r) == nil && r.Seq > 0 {
			out = append(out, r)
		}
	}
	return out
}

// The tenant's tool rules hold at both doors of the real binary: the stdio
// bridge (`oz0-node mcp`) and Streamable HTTP on --mcp-listen. A denied tool is
// not listed and its call is refused with the rule; the allowed one answers. Each
// call is a line of the audit stream naming its door, and a span the OTLP
// receiver gets (gRPC, chosen by the standard variable).
func TestE2EToolRulesAtBothDoorsAuditedAndTraced(t *testing.T) {
	backends := backendsForE2E(t)
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := newE2E(t, []string{"demo"})
	n.stop()
	n.writeTenantFile("tools", "# the tenant's tools\ndeny demo__add\n", 0o600)
	n.start("--backend", backends[0], "--mcp-listen", addr, "--otlp-endpoint", "http://"+rcv.GRPC)
	n.waitState("demo", "main", api.StateRunning)
	token, _ := os.ReadFile(filepath.Join(n.data, "mcp.token"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	doors := map[string]func() (*mcp.ClientSession, error){
		"stdio": func() (*mcp.ClientSession, error) {
			return mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
				Connect(ctx, &mcp.CommandTransport{Command: exec.Command(n.bin, "--data-dir", n.data, "mcp")}, nil)
		},
		"http": func() (*mcp.ClientSession, error) {
			hc := &http.Client{Transport: bearerTransport{strings.TrimSpace(string(token))}}
			return mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).
				Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		},
	}
	for door, connect := range doors {
		cs, err := connect()
		if err != nil {
			t.Fatalf("%s: %v", door, err)
		}
		var names []string
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		if slices := strings.Join(names, ","); strings.Contains(slices, "demo__add") || !strings.Contains(slices, "demo__echo") {
			t.Errorf("%s: tools/list %v; want demo__echo without demo__add", door, names)
		}
		for range 3 {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 1, "b": 2}})
			if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "deny demo__add (line 2)") {
				t.Fatalf("%s: a denied tool's call: %v %+v", door, err, res)
			}
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "through " + door}})
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "through "+door {
			t.Fatalf("%s: an allowed call: %v %+v", door, err, res)
		}
		cs.Close()
	}
	seen := map[string]bool{}
	defer func() {
		if t.Failed() {
			t.Logf("calls seen: %v", seen)
		}
	}()
	waitE2E(t, 10*time.Second, "audit lines of both doors", func() bool {
		for _, r := range n.auditLines() {
			if r.Kind == "call" {
				seen[r.Door+" "+r.Tool+" "+r.Decision+" "+r.Path] = true
			}
		}
		// Which path an HTTP call takes is the door's choice (node/daemon's
		// tests pin each path): the rule holds on whichever.
		return seen["stdio demo__add deny fast"] && (seen["http demo__add deny fast"] || seen["http demo__add deny sdk"]) &&
			seen["stdio demo__echo allow fast"] && (seen["http demo__echo allow fast"] || seen["http demo__echo allow sdk"])
	})
	var echo api.AuditRecord
	for _, r := range n.auditLines() {
		if r.Kind == "call" && r.Tool == "demo__echo" && r.Door == "stdio" {
			echo = r
		}
	}
	line, _ := json.Marshal(echo)
	t.Logf("one call's audit line: %s", line)

	span := rcv.WaitSpan(t, "tools/call demo__echo", func(s otlptest.Span) bool { return s.Attrs["oz0.door"] == "stdio" })
	for k, v := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "demo__echo", "gen_ai.operation.name": "execute_tool",
		"oz0.plugin": "demo", "oz0.server": "main", "oz0.decision": "allow", "oz0.args.sha256": echo.ArgsSHA256, "network.transport": "pipe"} {
		if span.Attrs[k] != v {
			t.Errorf("span %s = %q, want %q", k, span.Attrs[k], v)
		}
	}
	sj, _ := json.Marshal(span)
	t.Logf("its span: %s", sj)
	refused := rcv.WaitSpan(t, "tools/call demo__add", nil)
	if refused.Status != "Error" || refused.Attrs["error.type"] != "tool_error" {
		t.Errorf("a refused call's span: %+v", refused)
	}
}

func waitE2E(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// Approvals headless: `oz0-node approvals` lists what waits, `approve` lets it
// through once, `deny` refuses it, and a request nobody answers is refused when
// the wait ends, with the reason. Each answer is an audit line.
func TestE2EApprovalsThroughTheCLI(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"})
	n.stop()
	n.writeTenantFile("tools", "allow demo__echo\n", 0o600)
	n.start("--backend", backends[0], "--approval-wait", "6s")
	n.waitState("demo", "main", api.StateRunning)
	call := func() <-chan string {
		out := make(chan string, 1)
		go func() {
			b, err := exec.Command(n.bin, "--data-dir", n.data, "call", "demo__add", "--arg", "a=20", "--arg", "b=22", "--timeout", "30s").CombinedOutput()
			if err != nil {
				b = append(b, []byte(" (exit: "+err.Error()+")")...)
			}
			out <- string(b)
		}()
		return out
	}
	pending := func() api.Approval {
		var list []api.Approval
		waitE2E(t, 10*time.Second, "an approval", func() bool {
			out, err := n.oz("approvals", "--json")
			return err == nil && json.Unmarshal([]byte(out), &list) == nil && len(list) == 1
		})
		return list[0]
	}

	got := call()
	a := pending()
	text, _ := n.oz("approvals")
	if !strings.Contains(text, "tool demo__add for demo/main, asked 1 time(s)") || !strings.Contains(text, "oz0-node approve "+a.ID) {
		t.Errorf("oz0-node approvals:\n%s", text)
	}
	if out, err := n.oz("approve", a.ID); err != nil {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if out := <-got; !strings.Contains(out, "42") || strings.Contains(out, "exit") {
		t.Fatalf("a call approved once: %s", out)
	}

	got = call()
	a = pending()
	if out, err := n.oz("deny", a.ID); err != nil {
		t.Fatalf("deny: %v\n%s", err, out)
	}
	if out := <-got; !strings.Contains(out, "denied by") {
		t.Fatalf("a denied call: %s", out)
	}
	if out, err := n.oz("approve", a.ID); err == nil || !strings.Contains(out, "no request waits") {
		t.Errorf("approving an answered request: %v %s", err, out)
	}

	start := time.Now()
	if out := <-call(); !strings.Contains(out, "no operator answered within 6s") || time.Since(start) < 6*time.Second {
		t.Fatalf("an unanswered call after %v: %s", time.Since(start), out)
	}
	// The stream is written by its own goroutine: the last answer's line may
	// follow the call's end by a moment.
	answers := map[string]string{}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, r := range n.auditLines() {
			if r.Kind == "approval" {
				answers[r.Decision] = r.By
			}
		}
		if _, ok := answers["timeout"]; ok || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(answers["once"], "via cli") || !strings.Contains(answers["deny"], "via cli") {
		t.Errorf("the answers' audit lines: %v", answers)
	}
	if _, ok := answers["timeout"]; !ok {
		t.Errorf("no audit line for the unanswered request: %v", answers)
	}
	// `oz0-node audit` reads the stream, by plugin and as JSON.
	out, err := n.oz("audit", "--plugin", "demo")
	if err != nil || !strings.Contains(out, "approval") || !strings.Contains(out, "call") || !strings.Contains(out, "demo__add") {
		t.Errorf("oz0-node audit --plugin demo: %v\n%s", err, out)
	}
	out, _ = n.oz("audit", "--json", "--since", "1h")
	if first := strings.SplitN(out, "\n", 2)[0]; !strings.HasPrefix(first, `{"seq":`) {
		t.Errorf("oz0-node audit --json: %s", first)
	}
}
