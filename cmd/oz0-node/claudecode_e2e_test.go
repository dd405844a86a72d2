package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/node/policy"
)

// The real Claude Code drives a running node, end to end, on bwrap: setup writes
// the node into its settings, it connects, its model (a scripted fake of the
// Messages API on loopback, so the session runs offline) is offered the plugins'
// tools and calls them, and Claude Code forwards its hook events to the plugins'
// hooks in their sandboxes. Claude Code is installed from the npm registry at a
// pinned version and kept in a cache folder between runs (.ci/run fills it).

// claudeCodeVersion is the Claude Code release the test drives (.ci/run reads
// it from here).
const claudeCodeVersion = "2.1.328"

// claudeCodeCache is where Claude Code is kept between runs: OZ0_CI_CACHE, else
// /var/cache/oz0-ci when it can be written, else the user's cache folder.
func claudeCodeCache() string {
	if v := os.Getenv("OZ0_CI_CACHE"); v != "" {
		return v
	}
	if err := os.MkdirAll("/var/cache/oz0-ci", 0o755); err == nil {
		if f, err := os.CreateTemp("/var/cache/oz0-ci", ".probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/var/cache/oz0-ci"
		}
	}
	dir, _ := os.UserCacheDir()
	return filepath.Join(dir, "oz0-ci")
}

// claudeCodeBinary returns the claude binary of claudeCodeVersion, installing it
// into the cache when it is not there. The package's native binary comes as its
// optional platform package; the wrapper's install script only copies it, so it
// is not run. Without npm or the registry the test is skipped, saying so.
func claudeCodeBinary(t *testing.T) string {
	t.Helper()
	platform := map[string]string{"linux/amd64": "linux-x64", "linux/arm64": "linux-arm64", "darwin/arm64": "darwin-arm64", "darwin/amd64": "darwin-x64"}[runtime.GOOS+"/"+runtime.GOARCH]
	if platform == "" {
		t.Skipf("not tested: Claude Code publishes no binary for %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	dir := filepath.Join(claudeCodeCache(), "claude-code-"+claudeCodeVersion)
	bin := filepath.Join(dir, "node_modules", "@anthropic-ai", "claude-code-"+platform, "claude")
	if claudeVersionOK(bin) {
		return bin
	}
	what := "a real Claude Code " + claudeCodeVersion + " session against the node (setup, mcp list, the model's tool calls, forwarded hooks)"
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skipf("not tested: %s; npm is not installed to fetch it (CI installs it)", what)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Skipf("not tested: %s; no cache folder: %v", what, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".claude-code-*")
	if err != nil {
		t.Skipf("not tested: %s; no cache folder: %v", what, err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--no-save",
		"--prefix", tmp, "@anthropic-ai/claude-code@"+claudeCodeVersion).CombinedOutput()
	if err != nil {
		t.Skipf("not tested: %s; npm could not install it (registry unreachable?): %v\n%s", what, err, out)
	}
	t.Logf("installed Claude Code %s from the npm registry in %s", claudeCodeVersion, time.Since(t0).Round(time.Second))
	if !claudeVersionOK(filepath.Join(tmp, "node_modules", "@anthropic-ai", "claude-code-"+platform, "claude")) {
		t.Fatalf("npm installed Claude Code %s, but its %s binary does not report that version", claudeCodeVersion, platform)
	}
	// Another test process may have got there first: either copy is whole.
	if err := os.Rename(tmp, dir); err != nil && !claudeVersionOK(bin) {
		t.Fatalf("keep Claude Code in %s: %v", dir, err)
	}
	return bin
}

func claudeVersionOK(bin string) bool {
	out, err := exec.Command(bin, "--version").Output()
	return err == nil && strings.HasPrefix(strings.TrimSpace(string(out)), claudeCodeVersion+" ")
}

// modelStep is one answer of the fake model: a tool call or a text.
type modelStep struct {
	tool  string
	input string // JSON
	text  string
}

// fakeModel is a scripted Messages API: its answer to a request of the main loop
// (one that offers Bash) is the step after the one whose tool call the request
// answers; anything else (a side request) gets a short text. It keeps each
// request it answered.
type fakeModel struct {
	steps []modelStep
	mu    sync.Mutex
	seen  []modelRequest
}

type modelRequest struct {
	step int // the step it was answered with
	body []byte
	req  messagesRequest
}

type messagesRequest struct {
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// toolUseID names the tool call of step i.
func toolUseID(i int) string { return fmt.Sprintf("toolu_oz0_%02d", i) }

// block is one content block of a message.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

func blocks(raw json.RawMessage) []block {
	var bs []block
	if json.Unmarshal(raw, &bs) != nil {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []block{{Type: "text", Text: s}}
		}
	}
	return bs
}

// resultText is a tool result's content as text.
func resultText(b block) string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []string
	for _, p := range blocks(b.Content) {
		if p.Type == "text" {
			parts = append(parts, p.Text)
		} else {
			parts = append(parts, "["+p.Type+"]")
		}
	}
	return strings.Join(parts, "")
}

// lastResult is the tool result the request's last message carries.
func (r messagesRequest) lastResult() (block, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role != "user" {
			continue
		}
		for _, b := range blocks(r.Messages[i].Content) {
			if b.Type == "tool_result" {
				return b, true
			}
		}
		return block{}, false
	}
	return block{}, false
}

func (r messagesRequest) offers(tool string) bool {
	return slices.ContainsFunc(r.Tools, func(t struct {
		Name string `json:"name"`
	}) bool {
		return t.Name == tool
	})
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/messages") || strings.Contains(r.URL.Path, "count_tokens") {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not here"}}`, http.StatusNotFound)
		return
	}
	var req messagesRequest
	json.Unmarshal(body, &req)
	step := modelStep{text: "ok"}
	n := -1
	if req.offers("Bash") {
		n = 0
		if res, ok := req.lastResult(); ok {
			for i := range m.steps {
				if res.ToolUseID == toolUseID(i) {
					n = i + 1
				}
			}
		}
		step = modelStep{text: "Done."}
		if n < len(m.steps) {
			step = m.steps[n]
		}
		m.mu.Lock()
		m.seen = append(m.seen, modelRequest{step: n, body: body, req: req})
		m.mu.Unlock()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(name string, v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": fmt.Sprintf("msg_oz0_%02d", n), "type": "message", "role": "assistant",
		"model": "claude-fake", "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
	stop := "end_turn"
	if step.tool != "" {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "tool_use", "id": toolUseID(n), "name": step.tool, "input": map[string]any{}}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": step.input}})
		stop = "tool_use"
	} else {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": step.text}})
	}
	ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}

// request is the main-loop request answered with step i.
func (m *fakeModel) request(t *testing.T, i int) modelRequest {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.seen {
		if r.step == i {
			return r
		}
	}
	t.Fatalf("the model was never asked for step %d (%d requests)", i, len(m.seen))
	return modelRequest{}
}

// hookRunLine is one hook run as the node logs it.
type hookRunLine struct {
	plugin, event, tool, source, decision, network, dropped, duration string
}

// hookRunsLogged reads the node's hook runs from its log, in order.
func hookRunsLogged(log string) []hookRunLine {
	var out []hookRunLine
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, " msg=hook ") {
			continue
		}
		get := func(k string) string {
			i := strings.Index(line, " "+k+"=")
			if i < 0 {
				return ""
			}
			v := line[i+len(k)+2:]
			if strings.HasPrefix(v, `"`) {
				for j := 1; j < len(v); j++ {
					if v[j] == '\\' {
						j++
					} else if v[j] == '"' {
						if s, err := strconv.Unquote(v[:j+1]); err == nil {
							return s
						}
						return v[1:j]
					}
				}
			}
			if j := strings.IndexByte(v, ' '); j >= 0 {
				return v[:j]
			}
			return v
		}
		out = append(out, hookRunLine{get("plugin"), get("event"), get("tool"), get("source"), get("decision"), get("network"), get("dropped"), get("duration")})
	}
	return out
}

// A whole Claude Code session against the node, offline, on bwrap:
//   - setup claude-code writes the node in; claude mcp list says it is connected;
//   - the model is offered the plugins' tools and a call returns the sandboxed
//     server's answer;
//   - a PreToolUse deny stops a Bash command (its effect does not happen; the
//     model gets the reason);
//   - UserPromptSubmit, SessionStart and PostToolUse context reach the model;
//   - one plugin's hooks never see another's tool, and each hook runs exactly
//     once per event (no gateway-fired second run);
//   - a plugin hook's allow and updatedInput for Bash change nothing
//     (hook-hijack): the command runs as typed, and one the user did not allow
//     is not run.
//
// It prints the transcript of the session: the model's requests and answers, the
// hook runs and the tool results.
func TestE2EClaudeCodeDrivesTheNode(t *testing.T) {
	if !slices.Contains(backendsForE2E(t), policy.BackendBwrap) {
		t.Skip("not tested: a Claude Code session against a node on bwrap (bwrap does not work here)")
	}
	claude := claudeCodeBinary(t)
	start := time.Now()
	n := newE2E(t, []string{"agent-hooks", "hook-spy", "hook-hijack"}, "--backend", policy.BackendBwrap)
	for _, p := range []string{"agent-hooks", "hook-spy", "hook-hijack"} {
		n.waitState(p, "main", "running")
	}
	scratch := filepath.Dir(n.data)
	home, project := filepath.Join(scratch, "home"), filepath.Join(scratch, "project")
	for _, d := range []string{home, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(project, "victim.txt")
	os.WriteFile(victim, []byte("keep me\n"), 0o644)
	typed, hijacked := filepath.Join(project, "typed-by-the-model"), filepath.Join(project, "made-unasked")
	notes := filepath.Join(project, "notes.md")

	var transcript strings.Builder
	logf := func(format string, a ...any) { fmt.Fprintf(&transcript, format+"\n", a...) }
	defer func() { t.Logf("transcript of the session:\n%s", transcript.String()) }()

	// setup, as a developer runs it.
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "TMPDIR=" + os.TempDir()}
	setup := exec.Command(n.bin, "--data-dir", n.data, "setup", "claude-code")
	setup.Env = env
	out, err := setup.CombinedOutput()
	if err != nil {
		t.Fatalf("setup claude-code: %v\n%s", err, out)
	}
	logf("$ oz0-node setup claude-code\n%s", strings.TrimSpace(string(out)))

	model := &fakeModel{steps: []modelStep{
		{tool: "ToolSearch", input: `{"query":"select:mcp__oz0__hook-spy__echo,mcp__oz0__agent-hooks__echo","max_results":5}`},
		{tool: "mcp__oz0__hook-spy__echo", input: `{"text":"echo from the model"}`},
		{tool: "mcp__oz0__agent-hooks__echo", input: `{"text":"not for hook-spy spy-block"}`},
		{tool: "Bash", input: fmt.Sprintf(`{"command":"rm -rf %s","description":"remove a file"}`, victim)},
		{tool: "Bash", input: fmt.Sprintf(`{"command":"touch %s","description":"make a file"}`, typed)},
		{tool: "Bash", input: fmt.Sprintf(`{"command":"mkdir %s","description":"make a folder"}`, hijacked)},
		{tool: "Write", input: fmt.Sprintf(`{"file_path":%q,"content":"# notes\n"}`, notes)},
		{tool: "Read", input: fmt.Sprintf(`{"file_path":%q}`, notes)},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: model}
	go srv.Serve(ln)
	defer srv.Close()
	claudeEnv := append(env, "ANTHROPIC_BASE_URL=http://"+ln.Addr().String(), "ANTHROPIC_API_KEY=sk-fake",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1")
	runClaude := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, claude, args...)
		cmd.Env, cmd.Dir = claudeEnv, project
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		return out, err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err = runClaude(ctx, "mcp", "list")
	logf("$ claude mcp list\n%s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "oz0: ") || !strings.Contains(string(out), "Connected") {
		t.Fatalf("claude mcp list does not report the node connected: %v\n%s", err, out)
	}

	const prompt = "Tidy the project up."
	out, err = runClaude(ctx, "-p", prompt, "--output-format", "stream-json", "--verbose",
		"--allowedTools", "mcp__oz0", "Bash(rm:*)", "Bash(touch:*)", "Write", "Read")
	if err != nil {
		t.Fatalf("claude -p: %v\n%s", err, out)
	}
	logf("$ claude -p %q (model: the scripted fake on loopback)", prompt)

	// The session as Claude Code reports it, step by step, with the node's hook
	// runs between.
	var results = map[string]block{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev struct {
			Type      string `json:"type"`
			Subtype   string `json:"subtype"`
			HookEvent string `json:"hook_event"`
			HookName  string `json:"hook_name"`
			Outcome   string `json:"outcome"`
			ExitCode  *int   `json:"exit_code"`
			Stdout    string `json:"stdout"`
			Stderr    string `json:"stderr"`
			Message   struct {
				Content json.RawMessage `json:"content"`
			} `json:"message"`
			Result string `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "system" && ev.Subtype == "hook_response":
			logf("  Claude Code ran hook %s: %s, exit %d, stdout %q, stderr %q", ev.HookName, ev.Outcome, deref(ev.ExitCode), strings.TrimSpace(ev.Stdout), strings.TrimSpace(ev.Stderr))
		case ev.Type == "assistant":
			for _, b := range blocks(ev.Message.Content) {
				if b.Type == "tool_use" {
					logf("model → tool call %s %s", b.Name, b.Input)
				} else if b.Type == "text" {
					logf("model → %q", b.Text)
				}
			}
		case ev.Type == "user":
			for _, b := range blocks(ev.Message.Content) {
				if b.Type == "tool_result" {
					results[b.ToolUseID] = b
					logf("  tool result (error %v): %q", b.IsError, trim(resultText(b), 200))
				}
			}
		case ev.Type == "result":
			logf("session result: %q", ev.Result)
		}
	}
	logf("model requests (main loop):")
	model.mu.Lock()
	asked := slices.Clone(model.seen)
	model.mu.Unlock()
	for _, r := range asked {
		var mcpTools []string
		for _, tl := range r.req.Tools {
			if strings.HasPrefix(tl.Name, "mcp__") {
				mcpTools = append(mcpTools, tl.Name)
			}
		}
		res, _ := r.req.lastResult()
		logf("  request %d: %d tools offered (MCP: %v), %d messages, answers the result of %s: %q", r.step, len(r.req.Tools), mcpTools, len(r.req.Messages), res.ToolUseID, trim(resultText(res), 120))
	}

	// The model was offered the plugins' tools: named in the first request,
	// their schemas after ToolSearch.
	first := model.request(t, 0)
	body0, _ := json.Marshal(first.req.Messages)
	for _, tool := range []string{"mcp__oz0__hook-spy__echo", "mcp__oz0__agent-hooks__echo", "mcp__oz0__hook-hijack__echo"} {
		if !bytes.Contains(body0, []byte(tool)) {
			t.Errorf("the model was not told of %s", tool)
		}
	}
	if r := model.request(t, 1).req; !r.offers("mcp__oz0__hook-spy__echo") || !r.offers("mcp__oz0__agent-hooks__echo") {
		t.Errorf("after ToolSearch the model is not offered the plugins' tools: %v", r.Tools)
	}
	// The context of the SessionStart and UserPromptSubmit hooks reached it.
	for _, want := range []string{"agent-hooks: session context", "agent-hooks: the style guide applies"} {
		if !bytes.Contains(first.body, []byte(want)) {
			t.Errorf("the model never got %q", want)
		}
	}
	check := func(step int, isErr bool, want string) block {
		t.Helper()
		b, ok := results[toolUseID(step)]
		if !ok {
			t.Errorf("no result for step %d (%s)", step, model.steps[step].tool)
			return b
		}
		if b.IsError != isErr || !strings.Contains(resultText(b), want) {
			t.Errorf("step %d (%s): result (error %v) %q; want error %v with %q", step, model.steps[step].tool, b.IsError, resultText(b), isErr, want)
		}
		return b
	}
	// The sandboxed servers' answers.
	check(1, false, "echo from the model")
	check(2, false, "not for hook-spy spy-block") // hook-spy would have blocked it, had it seen it
	// agent-hooks denies rm -rf: the file stays, the model has the reason.
	check(3, true, "agent-hooks: rm -rf is not allowed")
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("rm -rf ran although a PreToolUse hook denied it: %v", err)
	}
	// hook-hijack allows and rewrites every Bash command: the command runs as
	// the model typed it, and one the user did not allow does not run.
	check(4, false, "")
	if _, err := os.Stat(typed); err != nil {
		t.Errorf("the command as typed did not run: %v", err)
	}
	if b := check(5, true, ""); !strings.Contains(resultText(b), "permission") && !strings.Contains(resultText(b), "approv") {
		t.Errorf("a Bash command the user did not allow: %q; want it refused for want of permission", resultText(b))
	}
	if _, err := os.Stat(hijacked); err == nil {
		t.Error("hook-hijack's allow ran a Bash command the user did not allow")
	}
	// PostToolUse context: agent-hooks' after Write, hook-hijack's after Read
	// (which ran with no network: it saw the agent's data).
	check(6, false, "")
	if r := model.request(t, 7).req; !bytes.Contains(mustJSON(r.Messages), []byte("agent-hooks: formatted the file")) {
		t.Error("agent-hooks' PostToolUse context never reached the model")
	}
	check(7, false, "# notes")
	if r := model.request(t, 8).req; !bytes.Contains(mustJSON(r.Messages), []byte("proxy unset")) {
		t.Error("hook-hijack's PostToolUse context (after Read, without a network) never reached the model")
	}

	seen, _ := os.ReadFile(filepath.Join(n.data, "homes", "hook-spy", "seen"))
	perCall := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(seen)), "\n") {
		var p struct {
			Event string `json:"hook_event_name"`
			ID    string `json:"tool_use_id"`
			Tool  string `json:"tool_name"`
		}
		json.Unmarshal([]byte(line), &p)
		if p.ID == "" {
			t.Errorf("hook-spy got a payload no agent sent (the gateway's own): %s", line)
		}
		perCall[p.Event+" "+p.ID]++
		if strings.Contains(line, "not for hook-spy") {
			t.Errorf("hook-spy saw agent-hooks' tool call: %s", line)
		}
	}
	for k, c := range perCall {
		if c != 1 {
			t.Errorf("hook-spy's recorder ran %d times for %s", c, k)
		}
	}
	// Project scope: files fit to commit, pending until the user approves the
	// server once, then connected, oz0-node found on PATH. The oz0-node on PATH
	// here keeps what Claude Code sends the node: the MCP revision it speaks.
	home2, project2, pathDir := filepath.Join(scratch, "home2"), filepath.Join(scratch, "project2"), filepath.Join(scratch, "bin")
	capture := filepath.Join(scratch, "mcp-from-claude-code.jsonl")
	for _, d := range []string{home2, project2, pathDir} {
		os.MkdirAll(d, 0o755)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = mcp ] && { tee -a %s | %s \"$@\"; exit; }; done\nexec %s \"$@\"\n", capture, n.bin, n.bin)
	os.WriteFile(filepath.Join(pathDir, "oz0-node"), []byte(wrapper), 0o755)
	env2 := []string{"HOME=" + home2, "PATH=" + pathDir + ":" + os.Getenv("PATH"), "LANG=C.UTF-8", "TMPDIR=" + os.TempDir(), "OZ0_DATA_DIR=" + n.data}
	setup = exec.Command(filepath.Join(pathDir, "oz0-node"), "setup", "claude-code", "--scope", "project")
	setup.Env, setup.Dir = env2, project2
	out, err = setup.CombinedOutput()
	logf("$ oz0-node setup claude-code --scope project\n%s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "pending approval") {
		t.Fatalf("setup --scope project: %v\n%s", err, out)
	}
	mcpJSON, _ := os.ReadFile(filepath.Join(project2, ".mcp.json"))
	if fi, err := os.Stat(filepath.Join(project2, ".mcp.json")); err != nil || fi.Mode().Perm() != 0o644 || bytes.Contains(mcpJSON, []byte(scratch)) {
		t.Errorf(".mcp.json: %v %v\n%s", err, fi.Mode(), mcpJSON)
	}
	claudeEnv = append(env2, "ANTHROPIC_BASE_URL=http://"+ln.Addr().String(), "ANTHROPIC_API_KEY=sk-fake", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	list := func() string {
		cmd := exec.CommandContext(ctx, claude, "mcp", "list")
		cmd.Env, cmd.Dir = claudeEnv, project2
		out, _ := cmd.CombinedOutput()
		logf("$ claude mcp list  (in the project)\n%s", strings.TrimSpace(string(out)))
		return string(out)
	}
	if out := list(); !strings.Contains(out, "Pending approval") {
		t.Errorf("an unapproved project server is not pending:\n%s", out)
	}
	// What the user's one approval records: the folder trusted, the server enabled.
	os.WriteFile(filepath.Join(project2, ".claude", "settings.local.json"), []byte(`{"enabledMcpjsonServers": ["oz0"]}`), 0o644)
	var state map[string]any
	b, _ := os.ReadFile(filepath.Join(home2, ".claude.json"))
	json.Unmarshal(b, &state)
	if state == nil {
		state = map[string]any{}
	}
	state["projects"] = map[string]any{project2: map[string]any{"hasTrustDialogAccepted": true}}
	b, _ = json.Marshal(state)
	os.WriteFile(filepath.Join(home2, ".claude.json"), b, 0o600)
	if out := list(); !strings.Contains(out, "Connected") {
		t.Errorf("the approved project server is not connected:\n%s", out)
	}
	wire, _ := os.ReadFile(capture)
	logf("what Claude Code sent the node (oz0-node mcp's input):")
	for _, line := range strings.Split(strings.TrimSpace(string(wire)), "\n") {
		logf("  %s", trim(line, 400))
	}
	if !bytes.Contains(wire, []byte(`"method":"server/discover"`)) || !bytes.Contains(wire, []byte(`"io.modelcontextprotocol/protocolVersion":"2026-07-28"`)) || bytes.Contains(wire, []byte(`"method":"initialize"`)) {
		t.Errorf("Claude Code %s no longer speaks the sessionless revision the node was tested with:\n%s", claudeCodeVersion, wire)
	}

	// The node's side, from its whole log once it has stopped.
	n.stop()
	logf("node's hook runs (plugin, event, tool, source, decision, network, dropped, time):")
	runs := hookRunsLogged(n.log.String())
	for _, r := range runs {
		logf("  %s %s %s %s %s %s %s %s", r.plugin, r.event, r.tool, r.source, r.decision, r.network, r.dropped, r.duration)
	}
	// The node's view: every run was forwarded by Claude Code (none fired by the
	// gateway itself), each hook once per event, hook-spy never on another
	// plugin's tool, hook-hijack's widening dropped.
	count := map[string]int{}
	for _, r := range runs {
		if r.source != "agent" {
			t.Errorf("a hook run not forwarded by Claude Code (fired twice): %+v", r)
		}
		count[r.plugin+" "+r.event+" "+r.tool]++
		if r.plugin == "hook-spy" && strings.HasPrefix(r.tool, "mcp__oz0__") && !strings.HasPrefix(r.tool, "mcp__oz0__hook-spy__") {
			t.Errorf("hook-spy's hook saw another plugin's tool: %+v", r)
		}
	}
	for key, want := range map[string]int{
		"hook-spy PreToolUse mcp__oz0__hook-spy__echo":  2, // its two PreToolUse hooks, once each
		"hook-spy PostToolUse mcp__oz0__hook-spy__echo": 1,
		"agent-hooks UserPromptSubmit ":                 1,
		"agent-hooks SessionStart ":                     1,
		"agent-hooks PostToolUse Write":                 1,
		"hook-hijack PostToolUse Read":                  1,
		"hook-hijack PreToolUse Bash":                   3,
	} {
		if count[key] != want {
			t.Errorf("%s: %d runs; want %d", key, count[key], want)
		}
	}
	var dropped bool
	for _, r := range runs {
		dropped = dropped || r.plugin == "hook-hijack" && r.event == "PreToolUse" && strings.Contains(r.dropped, "updatedInput") && strings.Contains(r.dropped, "allow")
	}
	if !dropped {
		t.Error("the node's log does not show hook-hijack's allow and updatedInput for Bash dropped")
	}

	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("the session took %s; keep it under 3 minutes", took)
	}
	logf("(the test took %s after Claude Code was at hand)", time.Since(start).Round(time.Millisecond))
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
