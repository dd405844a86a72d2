package daemon_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
)

// startAudited starts a node (mode off) writing the audit stream, with the
// tenant's tool rules given and approvals waiting wait (0: off).
func startAudited(t *testing.T, rules string, wait time.Duration, plugins ...string) *node {
	t.Helper()
	return startConfig(t, config.Run{Mode: policy.Off}, 1, func(d datadir.Dir, c *daemon.Config) {
		if rules != "" {
			if err := os.WriteFile(d.ToolRules(), []byte(rules), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s, err := audit.Open(d.Audit(), audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		c.Audit, c.ApprovalWait = s, wait
	}, plugins...)
}

// auditLines reads the node's audit stream now.
func (n *node) auditLines(t *testing.T) []api.AuditRecord {
	t.Helper()
	var out []api.AuditRecord
	if err := audit.Read(n.d.Audit(), func(r api.AuditRecord, _ []byte) bool { out = append(out, r); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitAudit waits for a line of the stream that ok accepts.
func (n *node) waitAudit(t *testing.T, what string, ok func(api.AuditRecord) bool) api.AuditRecord {
	t.Helper()
	var got api.AuditRecord
	waitFor(t, 10*time.Second, "an audit line: "+what, func() bool {
		for _, r := range n.auditLines(t) {
			if ok(r) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

func toolNames(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return " " + strings.Join(names, " ") + " "
}

// A tool the tenant's rules refuse is not listed and its call is refused with the
// rule, through both doors and on both paths: the fast path (no PreToolUse hook
// installed) and the SDK's (hook-spy's PreToolUse hook sends every call there).
// Each refusal's audit line says which door and path it came by, so a door or
// path that skipped the rule would leave a combination without its line.
func TestToolRulesHoldOnEveryDoorAndPath(t *testing.T) {
	const rules = "# the tenant's tools\ndeny unruly__big\n"
	for _, path := range []string{"fast", "sdk"} {
		t.Run(path, func(t *testing.T) {
			plugins := []string{"unruly"}
			if path == "sdk" {
				plugins = append(plugins, "hook-spy")
			}
			n := startAudited(t, rules, 0, plugins...)
			n.waitState(t, "unruly", "main", api.StateUnsandboxed)
			for _, door := range doors {
				cs := door.connect(n, t, nil)
				if names := toolNames(t, cs); strings.Contains(names, " unruly__big ") || !strings.Contains(names, " unruly__echo ") {
					t.Fatalf("%s: tools/list %s; want unruly__echo without unruly__big", door.name, names)
				}
				// The HTTP door sends a session's first call through the SDK:
				// the later ones take the fast path when they can.
				for range 3 {
					out, isErr := call(t, cs, "unruly__big", map[string]any{"mib": 1})
					if !isErr || !strings.Contains(out, "refused") || !strings.Contains(out, "deny unruly__big (line 2)") {
						t.Fatalf("%s: a denied tool's call answered %.200q (error %v)", door.name, out, isErr)
					}
				}
				n.waitAudit(t, door.name+"/"+path+" refusal", func(r api.AuditRecord) bool {
					return r.Kind == "call" && r.Tool == "unruly__big" && r.Door == door.audit && r.Path == path &&
						r.Decision == "deny" && strings.Contains(r.Rule, "deny unruly__big (line 2)") && r.Outcome == ""
				})
			}
			for _, s := range n.status(t).Plugins {
				if s.Name == "unruly" {
					if h := s.Servers[0].Hidden; len(h) != 1 || h[0].Tool != "unruly__big" || h[0].Rule != "deny unruly__big (line 2)" {
						t.Errorf("status shows hidden tools %+v", h)
					}
				}
			}
		})
	}
}

// A change of the rules applies to a connected client: it is told the list
// changed, the tool leaves and comes back, and its calls follow.
func TestToolRulesApplyLiveToConnectedClients(t *testing.T) {
	n := startAudited(t, "", 0, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	changed := make(chan struct{}, 16)
	cs := n.stdioClientWith(t, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": "hi"}); isErr || out != "hi" {
		t.Fatalf("before any rule: %q %v", out, isErr)
	}
	// Annotations count: echo says it is read-only, request says nothing (so
	// may be destructive, by MCP's default).
	writeRules(t, n, "deny annotation:destructiveHint\n")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed after the rules changed")
	}
	waitFor(t, 5*time.Second, "unruly__request hidden", func() bool {
		names := toolNames(t, cs)
		return !strings.Contains(names, " unruly__request ") && strings.Contains(names, " unruly__echo ")
	})
	if out, isErr := call(t, cs, "unruly__request", nil); !isErr || !strings.Contains(out, "deny annotation:destructiveHint (line 1)") {
		t.Fatalf("an unannotated tool under deny annotation:destructiveHint: %q %v", out, isErr)
	}
	if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": "ro"}); isErr || out != "ro" {
		t.Fatalf("a read-only tool: %q %v", out, isErr)
	}
	writeRules(t, n, "# nothing denied\n")
	waitFor(t, 5*time.Second, "unruly__request listed again", func() bool { return strings.Contains(toolNames(t, cs), " unruly__request ") })
	if _, isErr := call(t, cs, "unruly__request", nil); isErr {
		t.Fatal("a tool no rule refuses any more is still refused")
	}
}

// A file that cannot be parsed refuses every tool call and raises a finding
// naming the line, like the egress list.
func TestBrokenToolRulesFailClosed(t *testing.T) {
	n := startAudited(t, "allow unruly__*\nallow this is not a rule\n", 0, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": "x"}); !isErr || !strings.Contains(out, "line 2") {
		t.Fatalf("a call under broken rules: %q %v", out, isErr)
	}
	st := n.status(t)
	found := false
	for _, f := range st.Findings {
		found = found || f.Code == api.CodeToolRulesUnreadable && strings.Contains(f.Message, "line 2")
	}
	if !found || st.ToolRules.OK {
		t.Fatalf("no %s finding; tool rules status %+v", api.CodeToolRulesUnreadable, st.ToolRules)
	}
}

func writeRules(t *testing.T, n *node, content string) {
	t.Helper()
	tmp := n.d.ToolRules() + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.d.ToolRules()); err != nil {
		t.Fatal(err)
	}
}

// Every call and hook run is a line: door, session, plugin, server, tool,
// decision, duration, result size, outcome and the arguments' digest, never the
// arguments themselves.
func TestAuditLinesOfCallsAndHooks(t *testing.T) {
	n := startAudited(t, "", 0, "unruly", "hook-spy")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	n.waitState(t, "hook-spy", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	secret := "canary-7f3a9c-not-for-the-audit"
	if out, isErr := call(t, cs, "unruly__echo", map[string]any{"text": secret}); isErr || out != secret {
		t.Fatalf("echo: %q %v", out, isErr)
	}
	if _, isErr := call(t, cs, "hook-spy__echo", map[string]any{"text": "spy-block"}); !isErr {
		t.Fatal("hook-spy did not block")
	}
	args, _ := json.Marshal(map[string]any{"text": secret})
	sum := sha256.Sum256(args)
	line := n.waitAudit(t, "the echo call", func(r api.AuditRecord) bool { return r.Kind == "call" && r.Tool == "unruly__echo" })
	if line.Door != "stdio" || line.Plugin != "unruly" || line.Server != "main" || line.Decision != "allow" || line.Outcome != "ok" ||
		line.ResultBytes == 0 || line.Seconds <= 0 || line.Session == "" || line.ArgsSHA256 != hex.EncodeToString(sum[:]) || line.Seq == 0 {
		t.Errorf("call line %+v", line)
	}
	blocked := n.waitAudit(t, "the blocked call", func(r api.AuditRecord) bool { return r.Kind == "call" && r.Tool == "hook-spy__echo" })
	if blocked.Decision != "block" || !strings.Contains(blocked.Rule, "hook-spy blocked it") || blocked.Path != "sdk" {
		t.Errorf("blocked call line %+v", blocked)
	}
	hook := n.waitAudit(t, "the hook run", func(r api.AuditRecord) bool { return r.Kind == "hook" && r.Decision == "deny" })
	if hook.Plugin != "hook-spy" || hook.Event != "PreToolUse" || hook.Tool != "hook-spy__echo" || hook.Source != "gateway" {
		t.Errorf("hook line %+v", hook)
	}
	// A sessionless HTTP caller has no session id, as the stdio framing has
	// none: its line still names the door it came in by.
	if out, isErr := call(t, n.httpClient(t, nil, ""), "unruly__echo", map[string]any{"text": "sessionless"}); isErr || out != "sessionless" {
		t.Fatalf("sessionless echo: %q %v", out, isErr)
	}
	sum2 := sha256.Sum256([]byte(`{"text":"sessionless"}`))
	viaHTTP := n.waitAudit(t, "the sessionless call", func(r api.AuditRecord) bool {
		return r.Kind == "call" && r.ArgsSHA256 == hex.EncodeToString(sum2[:])
	})
	if viaHTTP.Door != "http" {
		t.Errorf("sessionless call line %+v", viaHTTP)
	}
	raw, _ := os.ReadFile(n.d.Audit())
	if bytes.Contains(raw, []byte(secret)) {
		t.Fatal("the audit stream holds a call's argument")
	}
	if fi, _ := os.Stat(n.d.Audit()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit stream mode %v", fi.Mode())
	}
}

// answer posts an approval's answer on the control socket.
func (n *node) answer(t *testing.T, id, answer string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", n.d.Control())
	}}}
	resp, err := hc.Post("http://node/v1/approvals/"+id, "application/json", strings.NewReader(`{"answer":"`+answer+`","via":"test"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// pending waits for one approval and returns it.
func (n *node) pending(t *testing.T) api.Approval {
	t.Helper()
	var a api.Approval
	waitFor(t, 10*time.Second, "an approval waiting", func() bool {
		st := n.status(t)
		if len(st.Approvals) == 0 {
			return false
		}
		a = st.Approvals[0]
		return true
	})
	return a
}

// A call the tenant's rules refuse waits for the operator: once lets it through,
// always writes the rule (with who and when) so the next call needs no answer,
// deny refuses it, and one nobody answers is refused when the wait ends. Each
// answer is an audit line.
func TestApprovalsOfToolCalls(t *testing.T) {
	n := startAudited(t, "allow unruly__echo\n", 3*time.Second, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	type result struct {
		out   string
		isErr bool
	}
	ask := func() chan result {
		c := make(chan result, 1)
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__request", Arguments: map[string]any{}})
			if err != nil {
				c <- result{err.Error(), true}
				return
			}
			c <- result{res.Content[0].(*mcp.TextContent).Text, res.IsError}
		}()
		return c
	}

	got := ask()
	a := n.pending(t)
	if a.Kind != "tool" || a.Tool != "unruly__request" || a.Plugin != "unruly" || a.Server != "main" || !a.Always || a.Asked != 1 ||
		!strings.Contains(a.Refusal, "no allow line") {
		t.Fatalf("approval %+v", a)
	}
	if code, body := n.answer(t, a.ID, "once"); code != 200 {
		t.Fatalf("once: %d %s", code, body)
	}
	if r := <-got; r.isErr {
		t.Fatalf("a call allowed once: %+v", r)
	}
	n.waitAudit(t, "the call let through once", func(r api.AuditRecord) bool {
		return r.Kind == "call" && r.Tool == "unruly__request" && r.Decision == "allow" && strings.Contains(r.Rule, "approved once by") && strings.Contains(r.Rule, "via test")
	})

	got = ask()
	a = n.pending(t)
	if code, body := n.answer(t, a.ID, "deny"); code != 200 {
		t.Fatalf("deny: %d %s", code, body)
	}
	if r := <-got; !r.isErr || !strings.Contains(r.out, "denied by") {
		t.Fatalf("a denied call: %+v", r)
	}

	start := time.Now()
	if r := <-ask(); !r.isErr || !strings.Contains(r.out, "no operator answered within 3s") || time.Since(start) < 3*time.Second {
		t.Fatalf("an unanswered call: %+v after %v", r, time.Since(start))
	}

	got = ask()
	a = n.pending(t)
	if code, body := n.answer(t, a.ID, "always"); code != 200 {
		t.Fatalf("always: %d %s", code, body)
	}
	if r := <-got; r.isErr {
		t.Fatalf("a call allowed always: %+v", r)
	}
	rules, _ := os.ReadFile(n.d.ToolRules())
	if !strings.Contains(string(rules), "\nallow unruly__request\n") || !strings.Contains(string(rules), "# allowed always by ") || !strings.Contains(string(rules), "via test at ") {
		t.Fatalf("the rules file after always:\n%s", rules)
	}
	waitFor(t, 5*time.Second, "a call with no approval", func() bool {
		_, isErr := call(t, cs, "unruly__request", nil)
		return !isErr
	})
	// The stream writes a line within milliseconds of its answer, not before
	// the answer returns.
	answers := map[string]bool{}
	for deadline := time.Now().Add(5 * time.Second); len(answers) < 4 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		clear(answers)
		for _, r := range n.auditLines(t) {
			if r.Kind == "approval" {
				answers[r.Decision] = r.Tool == "unruly__request" && r.Approval != "" && (r.By != "" || r.Decision == "timeout")
			}
		}
	}
	for _, want := range []string{"once", "deny", "timeout", "always"} {
		if !answers[want] {
			t.Errorf("no audit line for the %s answer: %v", want, answers)
		}
	}
}

// Only the control socket's owner answers: another user who reaches the socket
// (here: its mode widened, as it is for a moment before the node narrows it) is
// refused, and the request keeps waiting.
func TestOnlyTheSocketOwnerAnswers(t *testing.T) {
	if os.Getenv("OZ0_ANSWER_AS_OTHER") != "" {
		c, err := net.Dial("unix", os.Getenv("OZ0_ANSWER_AS_OTHER"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(3)
		}
		fmt.Fprintf(c, "POST /v1/approvals/1 HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"answer\":\"once\"}")
		var b bytes.Buffer
		b.ReadFrom(c)
		fmt.Print(b.String())
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("not tested: answering as another user needs root to start a process as one")
	}
	n := startAudited(t, "allow unruly__echo\n", 20*time.Second, "unruly")
	n.waitState(t, "unruly", "main", api.StateUnsandboxed)
	cs := n.stdioClientWith(t, nil)
	done := make(chan bool, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "unruly__request", Arguments: map[string]any{}})
		done <- err == nil && !res.IsError
	}()
	a := n.pending(t)
	// The socket and every folder above it within the test's own, open to
	// others; the test binary copied where they may run it.
	os.Chmod(n.d.Control(), 0o666)
	for dir := n.d.Run(); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
		os.Chmod(dir, 0o755)
	}
	self, _ := os.Executable()
	bin := filepath.Join(filepath.Dir(n.d.Root), "answer.test")
	if b, err := os.ReadFile(self); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	cmd := exec.Command(bin, "-test.run=^TestOnlyTheSocketOwnerAnswers$")
	cmd.Env = append(os.Environ(), "OZ0_ANSWER_AS_OTHER="+n.d.Control())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "403 Forbidden") || !strings.Contains(string(out), "not the control socket's owner") {
		t.Fatalf("another user's answer got (%v):\n%s", err, out)
	}
	if st := n.status(t); len(st.Approvals) != 1 || st.Approvals[0].ID != a.ID {
		t.Fatal("another user's answer answered the approval")
	}
	if code, body := n.answer(t, a.ID, "once"); code != 200 || !strings.Contains(body, "root (uid 0) via test") {
		t.Fatalf("the owner's answer: %d %s", code, body)
	}
	if !<-done {
		t.Fatal("the call was not let through")
	}
}
