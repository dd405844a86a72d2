package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/internal/testbin"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// End-to-end tests of the real binary: plugins installed from local git repositories
// with `plugin install`, the node started with `run`, tools called with `call`,
// through <data>/run/mcp.sock and through the `oz0-node mcp` stdio bridge, on each
// working sandbox backend.

// buildBinary is the oz0-node binary the end-to-end tests run (internal/testbin).
func buildBinary(t *testing.T) string {
	t.Helper()
	return testbin.Node(t)
}

type e2eNode struct {
	t      *testing.T
	bin    string
	data   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *bytes.Buffer
}

func (n *e2eNode) oz(args ...string) (string, error) {
	cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data}, args...)...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gitRepo makes a local git repository of a fixture plugin and returns its path
// and commit.
func gitRepo(t *testing.T, parent, name string) (string, string) {
	t.Helper()
	repo := filepath.Join(parent, "repos", name)
	if _, err := fixtures.Extract(name, repo); err != nil {
		t.Fatal(err)
	}
	return commitRepo(t, repo)
}

func commitRepo(t *testing.T, repo string) (string, string) {
	t.Helper()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@oz0.invalid", "add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@oz0.invalid", "commit", "-qm", "fixture"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return repo, strings.TrimSpace(string(out))
}

// newE2E makes a data folder under a path plugin users can traverse, installs the
// named fixtures and starts `oz0-node run` with the given flags.
func newE2E(t *testing.T, plugins []string, runFlags ...string) *e2eNode {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("not tested: git is not installed")
	}
	bin := buildBinary(t)
	parent, err := os.MkdirTemp("", "oz0-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o711)
	n := &e2eNode{t: t, bin: bin, data: filepath.Join(parent, "data"), log: &bytes.Buffer{}}
	t.Cleanup(func() { os.RemoveAll(parent) })
	failOnLeftMounts(t, parent)
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("node log:\n%s", n.log.String())
		}
	})
	for _, p := range plugins {
		repo, _ := gitRepo(t, parent, p)
		if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
			t.Fatalf("install %s: %v\n%s", p, err, out)
		}
	}
	n.start(runFlags...)
	return n
}

func (n *e2eNode) start(runFlags ...string) {
	n.t.Helper()
	n.cmd = exec.Command(n.bin, append([]string{"--data-dir", n.data, "run", "--log-format", "text"}, runFlags...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.Env = append(os.Environ(), "OZ0_E2E_CANARY=node-secret")
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)
	d, _ := datadir.New(n.data)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := api.NewClient(d.Control()).Status(context.Background()); err == nil {
			return
		}
		select {
		case <-n.exited:
			n.t.Fatalf("node exited:\n%s", n.log.String())
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("node did not come up:\n%s", n.log.String())
}

func (n *e2eNode) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
	}
	n.cmd = nil
}

func (n *e2eNode) status() *api.Status {
	d, _ := datadir.New(n.data)
	st, err := api.NewClient(d.Control()).Status(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return st
}

func (n *e2eNode) waitState(plugin, server string, states ...string) api.Server {
	n.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last api.Server
	for time.Now().Before(deadline) {
		for _, p := range n.status().Plugins {
			for _, s := range p.Servers {
				if p.Name == plugin && s.Name == server {
					last = s
					for _, want := range states {
						if s.State == want {
							return s
						}
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("%s/%s never reached %v; last %+v", plugin, server, states, last)
	return last
}

// backendsForE2E lists the backends this machine can run end to end: the tests run
// once per working backend, and skip with a message when none works.
func backendsForE2E(t *testing.T) []string {
	t.Helper()
	tr, err := probe.Run(context.Background(), platform(), "auto", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range []string{policy.BackendBwrap, policy.BackendGVisor, policy.BackendSeatbelt} {
		if _, ok := tr.Works[b]; ok {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		t.Skip("not tested: no sandbox backend works on this machine (CI installs bwrap and runsc)")
	}
	return out
}

func TestE2EStrictNodeRunsFixturesSandboxed(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"demo", "host-health", "claude-hooks"}, "--backend", backend)
			s := n.waitState("demo", "main", api.StateRunning)
			if s.Sandbox != backend {
				t.Errorf("demo/main sandbox %q, want %q", s.Sandbox, backend)
			}
			out, err := n.oz("call", "demo__whoami")
			if err != nil {
				t.Fatalf("call: %v\n%s", err, out)
			}
			var who struct {
				UID int      `json:"uid"`
				Env []string `json:"env"`
			}
			if err := json.Unmarshal([]byte(out), &who); err != nil {
				t.Fatalf("whoami output %q: %v", out, err)
			}
			if os.Geteuid() == 0 && who.UID != int(policy.PluginUID("demo")) {
				t.Errorf("demo runs as uid %d, want its plugin uid %d", who.UID, policy.PluginUID("demo"))
			}
			if strings.Contains(out, "OZ0_E2E_CANARY") {
				t.Errorf("the node's environment reached the tool: %v", who.Env)
			}
			// host-health is refused: status, findings and a call say why.
			hs := n.waitState("host-health", "health", api.StateRefused)
			if !strings.Contains(strings.Join(hs.Reasons, " "), "sandbox: host") {
				t.Errorf("host-health reasons %v", hs.Reasons)
			}
			out, err = n.oz("call", "host-health__health")
			if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, "sandbox: host") {
				t.Errorf("call of refused tool: err %v, out %q", err, out)
			}
			fout, _ := n.oz("findings")
			if !strings.Contains(fout, api.CodeServerRefused) || !strings.Contains(fout, "host-health") {
				t.Errorf("findings lack the refusal:\n%s", fout)
			}
			// A PreToolUse hook (claude-hooks, run in its own sandbox) blocks a call
			// of its plugin's tool.
			n.waitState("claude-hooks", "notes", api.StateRunning)
			out, err = n.oz("call", "claude-hooks__echo", "--arg", "text=forbidden words")
			if err == nil || !strings.Contains(out, "not allowed") {
				t.Errorf("hook did not block: err %v out %q", err, out)
			}
		})
	}
}

func TestE2EExemptionsOfHostHealth(t *testing.T) {
	backendsForE2E(t)
	n := newE2E(t, []string{"host-health"}, "--plugin-sandbox-exempt", "host-health")
	s := n.waitState("host-health", "health", api.StateExemptRun)
	if s.Sandbox != policy.BackendNone || s.User != "node user" {
		t.Errorf("exempt host-health: sandbox %s user %s", s.Sandbox, s.User)
	}
	out, err := n.oz("call", "host-health__health")
	if err != nil || !strings.HasPrefix(out, "load ") {
		t.Errorf("exempt call: %v %q", err, out)
	}
	n.stop()
	n.start("--plugin-sandbox-exempt", "host-health@"+strings.Repeat("0", 40))
	n.waitState("host-health", "health", api.StateRefused)
	fout, _ := n.oz("findings")
	if !strings.Contains(fout, api.CodeExemptionCommit) {
		t.Errorf("no commit-mismatch finding:\n%s", fout)
	}
}

func TestE2EStdioBridgeServesTools(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.waitState("demo", "main", api.StateRunning)
	cmd := exec.Command(n.bin, "--data-dir", n.data, "mcp")
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "demo__add") {
		t.Fatalf("tools via the stdio bridge: %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "3" {
		t.Fatalf("demo__add via bridge: %v %+v", err, res)
	}
}

func TestE2EKilledNodeLeavesNoSandbox(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"demo"}, "--backend", backend)
			n.waitState("demo", "main", api.StateRunning)
			out, err := n.oz("call", "demo__whoami")
			if err != nil {
				t.Fatal(out)
			}
			before := processesMentioning(n.data)
			if len(before) == 0 {
				t.Fatalf("no process mentions the data folder while the node runs")
			}
			n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.exited
			n.cmd = nil
			deadline := time.Now().Add(3 * time.Second)
			var left []string
			for time.Now().Before(deadline) {
				if left = processesMentioning(n.data); len(left) == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Fatalf("processes left after kill -9 of the node: %v", left)
			}
			// What a killed node cannot clean (gVisor's null-netns mount) goes at the
			// next start on the data folder, an exec's too; the harness checks.
			if out, err := n.oz("exec", "demo", "--backend", backend, "--", "/bin/true"); err != nil {
				t.Fatalf("exec after kill -9 of the node: %v %s", err, out)
			}
		})
	}
}

// processesMentioning lists processes whose command line names path (the node's
// sandboxes bind and run from under the data folder).
func processesMentioning(path string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		if bytes.Contains(b, []byte(path)) && e.Name() != fmt.Sprint(os.Getpid()) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// referencePlugin writes a plugin that runs the MCP reference servers from the npm
// registry, as a git repository.
func referencePlugin(t *testing.T, parent string) string {
	t.Helper()
	repo := filepath.Join(parent, "repos", "mcp-reference")
	os.MkdirAll(repo, 0o755)
	files := map[string]string{
		"plugin.json": `{"name": "mcp-reference", "version": "1.0.0", "description": "The MCP reference servers, from the npm registry"}`,
		// As published plugins name them: through npx, resolved at install.
		".mcp.json": `{"mcpServers": {
  "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"]},
  "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/"]}
}}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commitRepo(t, repo)
	return repo
}

func TestE2EReferenceServersFromNPM(t *testing.T) {
	if os.Getenv("OZ0_SKIP_NPM") != "" {
		t.Skip("not tested: OZ0_SKIP_NPM is set, so the npm reference servers were not installed")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("not tested: npm is not installed (CI installs it)")
	}
	for _, backend := range backendsForE2E(t) {
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, nil)
			n.stop()
			repo := referencePlugin(t, filepath.Dir(n.data))
			if out, err := n.oz(append([]string{"plugin", "install", repo, "--by", "e2e"}, registryAllowFlags(t)...)...); err != nil {
				t.Fatalf("install the reference servers: %v\n%s", err, out)
			}
			n.start("--backend", backend)
			n.waitState("mcp-reference", "everything", api.StateRunning)
			n.waitState("mcp-reference", "filesystem", api.StateRunning)

			d, _ := datadir.New(n.data)
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			progress := make(chan float64, 64)
			cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					select {
					case progress <- req.Params.Progress:
					default:
					}
				},
			})
			cs, err := cl.Connect(ctx, mcpTransport(d), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			tools := map[string]bool{}
			for tool, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				tools[tool.Name] = true
			}
			for _, want := range []string{"mcp-reference__echo", "mcp-reference__get-sum", "mcp-reference__list_directory", "mcp-reference__read_text_file"} {
				if !tools[want] {
					t.Errorf("tools/list lacks %s (have %d tools)", want, len(tools))
				}
			}
			text := func(tool string, args map[string]any) (string, bool) {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
				if err != nil {
					t.Fatalf("call %s: %v", tool, err)
				}
				var b strings.Builder
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						b.WriteString(tc.Text)
					}
				}
				return b.String(), res.IsError
			}
			if out, isErr := text("mcp-reference__echo", map[string]any{"message": "hello"}); isErr || !strings.Contains(out, "hello") {
				t.Errorf("everything echo: %q %v", out, isErr)
			}
			// The filesystem server is allowed "/", yet inside the sandbox "/" holds
			// only the allowlisted system folders: no data folder, no node key, no
			// other plugins, no /root or /home.
			out, isErr := text("mcp-reference__list_directory", map[string]any{"path": "/"})
			if isErr {
				t.Fatalf("list_directory /: %s", out)
			}
			for _, hidden := range []string{"root", "home", "boot", "srv"} {
				if strings.Contains(out, "[DIR] "+hidden+"\n") || strings.HasSuffix(out, "[DIR] "+hidden) {
					t.Errorf("the sandbox root shows host folder /%s:\n%s", hidden, out)
				}
			}
			if out, isErr := text("mcp-reference__read_text_file", map[string]any{"path": d.Key()}); !isErr && strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("the filesystem server read the node key: %q", out)
			}
			if out, isErr := text("mcp-reference__read_text_file", map[string]any{"path": "/etc/shadow"}); !isErr {
				t.Errorf("the filesystem server read /etc/shadow: %q", out)
			}
			home := d.Home("mcp-reference")
			if out, isErr := text("mcp-reference__write_file", map[string]any{"path": home + "/note.txt", "content": "kept"}); isErr {
				t.Errorf("write in its own home: %s", out)
			}
			// Prompts and resources are forwarded too (prompts namespaced like tools).
			var prompts []string
			for p, err := range cs.Prompts(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				prompts = append(prompts, p.Name)
			}
			if !strings.Contains(strings.Join(prompts, ","), "mcp-reference__simple-prompt") {
				t.Errorf("prompts via the gateway: %v", prompts)
			} else if gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "mcp-reference__simple-prompt"}); err != nil || len(gp.Messages) == 0 {
				t.Errorf("get prompt: %v %+v", err, gp)
			}
			// The gateway offers each plugin's resources under its own name.
			const doc = "oz0-plugin://mcp-reference/demo://resource/static/document/architecture.md"
			if rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: doc}); err != nil || len(rr.Contents) == 0 {
				t.Errorf("read resource %s via the gateway: %v", doc, err)
			}
			// Progress reaches the caller that asked for it.
			params := &mcp.CallToolParams{Name: "mcp-reference__trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 3}}
			params.SetProgressToken("e2e-progress")
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				t.Errorf("long-running operation: %v %+v", err, res)
			}
			select {
			case <-progress:
			case <-time.After(5 * time.Second):
				t.Error("no progress notification reached the caller through the gateway")
			}
			// A third-party server's own view of its environment: the minimal set only.
			if out, isErr := text("mcp-reference__get-env", nil); isErr || strings.Contains(out, "OZ0_E2E_CANARY") || !strings.Contains(out, "PLUGIN_ROOT") {
				t.Errorf("get-env through the sandbox: error %v, %.300s", isErr, out)
			}

			commit := n.status().Plugins[0].Commit
			pluginDir := d.PluginCommit("mcp-reference", commit)
			// It writes its folder as under Claude Code: its view, never the
			// installed commit (docs/promises.md §12).
			if out, isErr := text("mcp-reference__write_file", map[string]any{"path": pluginDir + "/x", "content": "x"}); isErr {
				t.Errorf("could not write its own folder: %q", out)
			}
			if _, err := os.Stat(pluginDir + "/x"); err == nil {
				t.Errorf("a file written in the sandbox appeared in the installed plugin folder on the host")
			}
			if b, err := os.ReadFile(d.View("mcp-reference", commit) + "/x"); err != nil || string(b) != "x" {
				t.Errorf("the write is not in the plugin's view: %q %v", b, err)
			}
		})
	}
}

func TestE2ESecondNodeOnSameDataFolderRefused(t *testing.T) {
	n := newE2E(t, []string{"demo"}, "--backend", "none")
	out, err := exec.Command(n.bin, "--data-dir", n.data, "run", "--backend", "none").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another node is already running") {
		t.Fatalf("a second node on the same data folder: err %v, out %q", err, out)
	}
	if st := n.status(); st.Node.PID != n.cmd.Process.Pid {
		t.Errorf("the first node no longer answers its control socket: pid %d", st.Node.PID)
	}
}

func TestE2EInstallsWhileRunningAreReconciled(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.waitState("demo", "main", api.StateRunning)
	firstCommit := n.status().Plugins[0].Commit
	parent := filepath.Dir(n.data)

	// A new plugin installed while the node runs starts (fsnotify on plugins/).
	repo, _ := gitRepo(t, parent, "egress-demo")
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	n.waitState("egress-demo", "fetcher", api.StateRunning)

	// A new commit of an installed plugin restarts it on that commit.
	demoRepo := filepath.Join(parent, "repos", "demo")
	os.WriteFile(filepath.Join(demoRepo, "CHANGES"), []byte("second commit\n"), 0o644)
	_, commit2 := commitRepo(t, demoRepo)
	if out, err := n.oz("plugin", "install", demoRepo, "--by", "e2e"); err != nil {
		t.Fatalf("update: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got string
		for _, p := range n.status().Plugins {
			if p.Name == "demo" {
				got = p.Commit
			}
		}
		if got == commit2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo still at %s after installing %s", got, commit2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.waitState("demo", "main", api.StateRunning)
	// The server now runs from the new commit's folder, and nothing from the old.
	d, _ := datadir.New(n.data)
	deadline = time.Now().Add(20 * time.Second)
	for len(processesMentioning(d.PluginCommit("demo", commit2))) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no demo server runs from the new commit %s", commit2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left := processesMentioning(d.PluginCommit("demo", firstCommit)); len(left) > 0 {
		t.Errorf("a demo server still runs from the old commit: %v", left)
	}

	// A removal stops the plugin's servers.
	if out, err := n.oz("plugin", "remove", "egress-demo", "--yes"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		gone := true
		for _, p := range n.status().Plugins {
			if p.Name == "egress-demo" {
				gone = false
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("egress-demo still listed after its removal")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its server is stopped gracefully (stdin closed, then signals), which may
	// outlast the status update by a moment; it must end all the same.
	deadline = time.Now().Add(10 * time.Second)
	for {
		left := processesMentioning(filepath.Join(n.data, "plugins", "egress-demo"))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("egress-demo's server still runs 10 s after its removal: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestE2EMCPListenNeedsTheBearerToken(t *testing.T) {
	backends := backendsForE2E(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := newE2E(t, []string{"demo"}, "--backend", backends[0], "--mcp-listen", addr)
	n.waitState("demo", "main", api.StateRunning)
	tokenBytes, err := os.ReadFile(filepath.Join(n.data, "mcp.token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(n.data, "mcp.token")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mcp.token mode %v, want 0600", fi.Mode().Perm())
	}
	token := strings.TrimSpace(string(tokenBytes))
	connect := func(tok string) error {
		hc := &http.Client{Transport: bearerTransport{tok}}
		cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			return err
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__add", Arguments: map[string]any{"a": 2, "b": 3}})
		if err != nil {
			return err
		}
		if res.IsError || res.Content[0].(*mcp.TextContent).Text != "5" {
			return fmt.Errorf("demo__add: %+v", res)
		}
		return nil
	}
	if err := connect(""); err == nil {
		t.Error("the MCP listener answered without a bearer token")
	}
	if err := connect("wrong" + token); err == nil {
		t.Error("the MCP listener answered a wrong bearer token")
	}
	if err := connect(token); err != nil {
		t.Errorf("with the token: %v", err)
	}
}

// bearerTransport adds an Authorization header when it has a token.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A developer's node runs as an ordinary user: its bwrap sandboxes use an
// unprivileged user namespace and run as the node's user, and the bridge inside
// each hands its loopback listener to the node's proxy. CI runs as root, so the
// node is dropped to an unprivileged uid here.
func TestE2ENonRootNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: dropping the node to an unprivileged uid needs root (as in CI)")
	}
	if !slices.Contains(backendsForE2E(t), policy.BackendBwrap) {
		t.Skip("not tested: bwrap does not work here")
	}
	const uid = 65534
	n := newE2E(t, []string{"egress-demo"}, "--backend", "none")
	n.stop()
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", uid, uid), n.data).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	cmd := exec.Command(n.bin, "--data-dir", n.data, "run", "--log-format", "text", "--backend", "bwrap")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + n.data}
	n.startCommand(cmd)
	s := n.waitState("egress-demo", "fetcher", api.StateRunning)
	if s.Sandbox != policy.BackendBwrap || !strings.Contains(s.User, "node user") {
		t.Errorf("fetcher runs %s as %q; want bwrap as the node's user", s.Sandbox, s.User)
	}
	out, _ := n.oz("call", "egress-demo__fetch", "--arg", "url=http://denied.example/")
	if !strings.Contains(out, "403") {
		t.Errorf("a host the lists refuse, fetched from the non-root node's sandbox: %q, want the proxy's 403", out)
	}
	if out, _ := n.oz("status"); !strings.Contains(out, "plugin users: none: the node does not run as root") ||
		!strings.Contains(out, "no per-plugin users") {
		t.Errorf("the non-root node's status does not say its plugins share its user:\n%s", out)
	}
	// The node opened the sandbox's proxy listener in its namespace through its
	// helper (no bridge inside).
	if log := n.log.String(); !strings.Contains(log, "opened by the caller, e.g. inside a sandbox's network namespace") {
		t.Errorf("the non-root node did not serve the proxy inside the sandbox's namespace:\n%s", log)
	}
}
