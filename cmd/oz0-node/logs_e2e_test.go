package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// noisyPlugin is demo whose server writes hostileText to its stderr at each start,
// from inside its sandbox, before serving MCP.
func noisyPlugin(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "noisy")
	if _, err := fixtures.Extract("demo", repo); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"name": "noisy", "version": "1.0.0", "description": "writes hostile stderr",
		"extensions": map[string]any{"ai.oz0": map[string]any{"namespace": "dev.oz0-tests"}}})
	if err := os.WriteFile(filepath.Join(repo, "plugin.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(map[string]any{"mcpServers": map[string]any{"main": map[string]any{
		"command": "sh",
		"args":    []string{"-c", `printf '%s\n' "$HOSTILE" >&2; exec python3 "$0" --tools echo`, "${PLUGIN_ROOT}/server.py"},
		"env":     map[string]string{"HOSTILE": "stderr " + hostileText},
	}}})
	if err := os.WriteFile(filepath.Join(repo, ".mcp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	commitRepo(t, repo)
	return repo
}

// logsOf runs `oz0-node logs args…` and checks its output drives no terminal.
func (n *e2eNode) logsOf(t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.oz(append([]string{"logs"}, args...)...)
	if err != nil {
		t.Fatalf("logs %v: %v\n%s", args, err, out)
	}
	if bad := terminalActive(out); len(bad) > 0 {
		t.Errorf("logs %v carries terminal controls near %q", args, bad)
	}
	return out
}

// followLogs starts `oz0-node logs args… -f` and returns its lines as they come.
func (n *e2eNode) followLogs(t *testing.T, args ...string) <-chan string {
	t.Helper()
	cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data, "logs", "-f"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

func waitLine(t *testing.T, lines <-chan string, what string, match func(string) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("logs -f ended before %s", what)
			}
			if bad := terminalActive(l); len(bad) > 0 {
				t.Errorf("logs -f line carries terminal controls: %q", l)
			}
			if match(l) {
				return
			}
		case <-deadline:
			t.Fatalf("logs -f never showed %s", what)
		}
	}
}

// `oz0-node logs` over the control API of a real node: a sandboxed server's hostile
// stderr comes out readable and inert, each line under its server's name when a
// whole plugin is shown; -f follows a restart; the node's own log shows and follows.
func TestE2ELogsShowsStderrAndTheNodesLogInert(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, nil, "--backend", backends[0])
	n.stop()
	if out, err := n.oz("plugin", "install", noisyPlugin(t), "--by", "e2e"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	n.start("--backend", backends[0])
	n.waitState("noisy", "main", api.StateRunning)

	readable := func(l string) bool { return strings.Contains(l, "ABCDE") }
	out := n.logsOf(t, "noisy/main")
	if !strings.Contains(out, "stderr ABCDE") {
		t.Errorf("logs noisy/main lost the readable text:\n%q", out)
	}
	out = n.logsOf(t, "noisy")
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !strings.HasPrefix(l, "main: ") {
			t.Errorf("logs noisy: line %q is not under its server's name (a server could forge a line)", l)
		}
	}
	if !strings.Contains(out, "main: stderr ABCDE") {
		t.Errorf("logs noisy lost the readable text:\n%q", out)
	}

	follow := n.followLogs(t, "noisy/main", "-n", "5")
	waitLine(t, follow, "the backlog", readable)
	d, _ := datadir.New(n.data)
	if err := api.NewClient(d.Control()).Restart(context.Background(), "noisy", "main"); err != nil {
		t.Fatal(err)
	}
	waitLine(t, follow, "the restarted server's stderr", readable)

	out = n.logsOf(t)
	if !strings.Contains(out, "node starting") {
		t.Errorf("logs (the node's own) lacks its start:\n%s", out)
	}
	nodeFollow := n.followLogs(t, "-n", "1")
	<-nodeFollow // the backlog line
	n.cmd.Process.Signal(syscall.SIGHUP)
	waitLine(t, nodeFollow, "the node's SIGHUP line", func(l string) bool { return strings.Contains(l, "SIGHUP") })

	if out, err := n.oz("logs", "nosuch/main"); err == nil || !strings.Contains(out, "no such plugin or server") {
		t.Errorf("logs of an unknown server: %v %q", err, out)
	}
}
