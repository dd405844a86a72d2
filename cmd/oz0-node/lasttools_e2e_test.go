package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// A call of a tool of a server that is not running says why (starting, crash
// loop), not "unknown tool", also after the node restarted: the node keeps each
// server's last tool list in its data folder.
func TestE2ECallOfStoppedServersToolSaysWhy(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.waitState("demo", "main", api.StateRunning)
	n.stop()

	d, _ := datadir.New(n.data)
	fi, err := os.Stat(d.LastTools("demo"))
	if err != nil {
		t.Fatalf("no last tool list after the server ran: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("last tool list mode %v, want 0600", fi.Mode().Perm())
	}

	// The next commits of the plugin: one starts slowly, one crashes at start (its
	// script is missing), one needs a value the operator has not set.
	reinstall := func(script string, env map[string]string, args ...string) {
		t.Helper()
		repo := filepath.Join(filepath.Dir(n.data), "repos", "demo")
		srv := map[string]any{"command": "python3", "args": append([]string{"${PLUGIN_ROOT}/" + script, "--tools", "echo,add,whoami,read"}, args...)}
		if env != nil {
			srv["env"] = env
		}
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"main": srv}})
		if err := os.WriteFile(filepath.Join(repo, ".mcp.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		commitRepo(t, repo)
		if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
	}
	call := func(want ...string) {
		t.Helper()
		out, err := n.oz("call", "demo__add", "--arg", "a=1", "--arg", "b=2")
		if err == nil {
			t.Fatalf("call of a server's tool that is not running succeeded: %s", out)
		}
		t.Logf("call answered: %s", out)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("call answered %q, want it to say %q", out, w)
			}
		}
		if strings.Contains(strings.ToLower(out), "unknown tool") {
			t.Fatalf("call answered unknown tool: %q", out)
		}
	}

	reinstall("server.py", nil, "--start-delay", "30")
	n.start("--backend", backends[0])
	call("not running", "demo/main", "start")
	n.stop()

	reinstall("missing.py", nil)
	n.start("--backend", backends[0])
	deadline := time.Now().Add(90 * time.Second)
	for looped := false; !looped; {
		for _, f := range n.status().Findings {
			looped = looped || f.Code == api.CodeCrashLoop && f.Subject == "demo/main"
		}
		if time.Now().After(deadline) {
			t.Fatal("no crash-loop finding for demo/main")
		}
		time.Sleep(200 * time.Millisecond)
	}
	call("not running", "demo/main", "crash loop", "crashes", "likely cause: command", "missing.py was not found in its sandbox")
	n.stop()

	// A server held back for a value the operator has not set says which command
	// sets it.
	reinstall("server.py", map[string]string{"TOKEN": "${LASTTOOLS_TOKEN}"})
	n.start("--backend", backends[0])
	n.waitState("demo", "main", api.StateRefused)
	call("not running", "demo/main", "refused", "oz0-node plugin config demo LASTTOOLS_TOKEN=")

	// A removed plugin's list goes with it.
	if out, err := n.oz("plugin", "remove", "demo", "--yes"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	deadline = time.Now().Add(30 * time.Second)
	for _, err := os.Stat(d.LastTools("demo")); err == nil; _, err = os.Stat(d.LastTools("demo")) {
		if time.Now().After(deadline) {
			t.Fatal("the last tool list of a removed plugin is still there")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
