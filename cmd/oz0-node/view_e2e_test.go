package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/installed"
)

// A plugin writes into its own folder, as published plugins do under Claude Code
// (a Python server's .venv, a formatter hook's logs/): into its writable view, a
// copy of the installed commit its sandboxes see at the commit's path. The view
// survives restarts, is dropped by an update, is shown by sandbox show, and the
// installed commit's files stay byte for byte as installed; a hook run on the
// agent's data writes a view of its own (docs/promises.md §12, §16).
func TestE2EPluginsWriteTheirViewNeverTheirInstalledCommit(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"writes-own-folder", "demo"}, "--backend", backend)
			n.waitState("writes-own-folder", "main", api.StateRunning)
			n.waitState("demo", "main", api.StateRunning)
			in, err := installed.Lookup(n.dir(), "writes-own-folder")
			if err != nil {
				t.Fatal(err)
			}
			installedDigest := treeDigest(t, in.Dir)
			view := n.dir().View("writes-own-folder", in.Commit)
			starts := func() int {
				b, _ := os.ReadFile(filepath.Join(view, ".venv", "starts"))
				return strings.Count(string(b), "start")
			}
			if starts() != 1 {
				t.Fatalf("the server's .venv is not in its view %s (starts %d)", view, starts())
			}

			// The gateway's call of its own tool: its hook writes the plugin's view.
			if out, err := n.oz("call", "writes-own-folder__echo", "--arg", "text=hi"); err != nil || strings.TrimSpace(out) != "hi" {
				t.Fatalf("call: %v %q", err, out)
			}
			// The agent's Write: its hook run gets a view of its own.
			checkHookCase(t, n, hookCase{name: "agent's Write", payload: basePayload("PostToolUse", map[string]any{"tool_name": "Write",
				"tool_input": map[string]any{"file_path": "/home/dev/project/a.go", "content": "package a"}, "tool_response": map[string]any{"success": true}}), noOut: true})
			if b, err := os.ReadFile(filepath.Join(view, "logs", "format.log")); err != nil || string(b) != "formatted\n" {
				t.Errorf("its hook on its own tool's call did not write logs/ in the view: %q %v", b, err)
			}
			hookView := n.dir().HookView("writes-own-folder", in.Commit)
			if b, err := os.ReadFile(filepath.Join(hookView, "logs", "format.log")); err != nil || string(b) != "formatted\n" {
				t.Errorf("its hook on the agent's Write did not write logs/ in its own view %s: %q %v", hookView, b, err)
			}

			// The server reads its view at the installed commit's path.
			out, err := n.oz("call", "writes-own-folder__read", "--arg", "path="+filepath.Join(in.Dir, ".venv", "starts"))
			if err != nil || !strings.Contains(out, "start") {
				t.Errorf("the server does not see its view at its folder's path: %v %q", err, out)
			}
			// Another plugin sees neither the view nor the commit.
			for _, p := range []string{view, filepath.Join(in.Dir, ".venv")} {
				if out, err := n.oz("exec", "demo", "--backend", backend, "--", "ls", p); err == nil {
					t.Errorf("plugin demo lists %s:\n%s", p, out)
				}
			}
			if out, _ := n.oz("sandbox", "show", "writes-own-folder", "--backend", backend); !strings.Contains(out, view) {
				t.Errorf("sandbox show does not name the view %s:\n%s", view, out)
			}

			// It survives a restart of the server.
			if out, err := n.oz("restart", "writes-own-folder/main"); err != nil {
				t.Fatalf("restart: %v %s", err, out)
			}
			deadline := time.Now().Add(30 * time.Second)
			for starts() != 2 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if starts() != 2 {
				t.Errorf("after a restart the view holds %d starts; want 2 (the .venv kept)", starts())
			}
			n.waitState("writes-own-folder", "main", api.StateRunning)

			for _, name := range []string{".venv", "logs"} {
				if _, err := os.Lstat(filepath.Join(in.Dir, name)); err == nil {
					t.Errorf("%s appeared in the installed commit's folder", name)
				}
			}
			if got := treeDigest(t, in.Dir); got != installedDigest {
				t.Errorf("the installed commit's files changed while the plugin ran")
			}

			// An update is a new commit with a fresh view; the old view goes.
			repo := filepath.Join(filepath.Dir(n.data), "repos", "writes-own-folder")
			if err := os.WriteFile(filepath.Join(repo, "CHANGES"), []byte("1.0.1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "1.0.1"}} {
				cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=e2e", "-c", "user.email=e2e@example.com"}, args...)...)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, b)
				}
			}
			if out, err := n.oz("plugin", "update", "writes-own-folder", "--by", "e2e"); err != nil {
				t.Fatalf("update: %v\n%s", err, out)
			}
			next, err := installed.Lookup(n.dir(), "writes-own-folder")
			if err != nil || next.Commit == in.Commit {
				t.Fatalf("update did not install a new commit: %v", err)
			}
			newView := n.dir().View("writes-own-folder", next.Commit)
			// Until the server's first start is written in it: the file exists
			// a moment before its line does.
			deadline = time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if b, err := os.ReadFile(filepath.Join(newView, ".venv", "starts")); err == nil && strings.Contains(string(b), "start") {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if b, err := os.ReadFile(filepath.Join(newView, ".venv", "starts")); err != nil || strings.Count(string(b), "start") != 1 {
				t.Errorf("the updated plugin did not start afresh in a new view: %q %v", b, err)
			}
			if _, err := os.Stat(view); err == nil {
				t.Errorf("the old commit's view %s is still there after the update", view)
			}
		})
	}
}

// The operator shows a plugin's sandboxes a host path read-only, at its own path
// (a browser a server drives, under /opt on most hosts): only that plugin's,
// only read, shown in status and sandbox show (--plugin-ro-path).
func TestE2EOperatorShowsAPluginAHostPathReadOnly(t *testing.T) {
	for _, backend := range backendsForE2E(t) {
		if backend == "seatbelt" {
			continue
		}
		t.Run(backend, func(t *testing.T) {
			n := newE2E(t, []string{"demo", "egress-demo"}, "--backend", backend)
			n.stop()
			browser := filepath.Join(filepath.Dir(n.data), "opt", "browser")
			if err := os.MkdirAll(browser, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(browser, "chrome"), []byte("the host's browser\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Dir(browser), 0o755)
			n.start("--backend", backend, "--plugin-ro-path", "demo="+browser)
			n.waitState("demo", "main", api.StateRunning)
			n.waitState("egress-demo", "fetcher", api.StateRunning)
			read := filepath.Join(browser, "chrome")
			if out, err := n.oz("call", "demo__read", "--arg", "path="+read); err != nil || !strings.Contains(out, "the host's browser") {
				t.Errorf("demo does not read the path it was shown: %v\n%s", err, out)
			}
			if out, err := n.oz("exec", "demo", "--backend", backend, "--", "/bin/sh", "-c", "echo x > "+read+" || echo refused"); err != nil || !strings.Contains(out, "refused") {
				t.Errorf("demo could write the path it was shown read-only: %v\n%s", err, out)
			}
			if b, _ := os.ReadFile(read); string(b) != "the host's browser\n" {
				t.Errorf("the host's file changed: %q", b)
			}
			if out, err := n.oz("exec", "egress-demo", "--backend", backend, "--", "cat", read); err == nil || strings.Contains(out, "the host's browser") {
				t.Errorf("another plugin reads the path shown to demo: %v\n%s", err, out)
			}
			var shown bool
			for _, p := range n.status().Plugins {
				shown = shown || p.Name == "demo" && slices.Contains(p.ROPaths, browser)
			}
			if !shown {
				t.Errorf("status does not show demo's read-only path")
			}
			if out, _ := n.oz("status"); !strings.Contains(out, "--plugin-ro-path demo="+browser) {
				t.Errorf("oz0-node status does not show the grant:\n%s", out)
			}
			if out, _ := n.oz("sandbox", "show", "demo", "--backend", backend); !strings.Contains(out, browser) {
				t.Errorf("sandbox show does not name the path:\n%s", out)
			}
		})
	}
}
