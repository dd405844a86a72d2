package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// writePlugin installs a plugin of one server whose command is argv.
func writePlugin(t *testing.T, d datadir.Dir, name string, argv ...string) {
	t.Helper()
	commit := commitOf(name, 1)
	dir := d.PluginCommit(name, commit)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(`{"name": "`+name+`", "version": "1.0.0"}`), 0o644)
	args := `"` + strings.Join(argv[1:], `", "`) + `"`
	os.WriteFile(filepath.Join(dir, ".mcp.json"), []byte(`{"mcpServers": {"main": {"command": "`+argv[0]+`", "args": [`+args+`]}}}`), 0o644)
	if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "test", InstalledBy: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// A server that starts but never answers initialize is reported (a finding with
// its stderr's last lines), and calls of its plugin's tools answer why rather
// than "unknown tool".
func TestServerThatNeverInitializesIsReported(t *testing.T) {
	n := startConfig(t, config.Run{Mode: policy.Strict}, 0, func(_ datadir.Dir, c *daemon.Config) { c.InitTimeout = 500 * time.Millisecond })
	writePlugin(t, n.d, "mute", "/bin/sh", "-c", "echo waiting for a license server >&2; exec sleep 3600")
	n.dm.Reconcile()
	var f api.Finding
	waitFor(t, 20*time.Second, "the server-unresponsive finding", func() bool {
		for _, x := range n.status(t).Findings {
			if x.Code == api.CodeUnresponsive && x.Subject == "mute/main" {
				f = x
				return true
			}
		}
		return false
	})
	if !strings.Contains(f.Message, "did not answer initialize within 500ms") || !strings.Contains(f.Message, "waiting for a license server") {
		t.Errorf("finding %+v: want the cause and the stderr tail", f)
	}
	cs := n.client(t)
	text, isErr := call(t, cs, "mute__anything", nil)
	if !isErr || !strings.Contains(text, "mute/main") || !strings.Contains(text, "did not answer initialize") || strings.Contains(text, "license server") {
		t.Errorf("a call of the plugin's tool answered %q (error %v); want why, without its stderr", text, isErr)
	}
}

// A plugin whose install record becomes unreadable while the node runs is held
// back: listed with why, a finding naming the file, its tools answer why; once
// the record is back it runs again.
func TestPluginWithAnUnreadableRecordIsHeldNotDropped(t *testing.T) {
	n := start(t, policy.Strict, 0, nil, "demo")
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	cs := n.client(t)
	if text, isErr := call(t, cs, "demo__echo", map[string]any{"text": "hi"}); isErr || text != "hi" {
		t.Fatalf("echo: %q %v", text, isErr)
	}
	record := filepath.Join(n.d.Plugin("demo"), commitOf("demo", 1)+".json")
	good, _ := os.ReadFile(record)
	os.WriteFile(record, []byte("{torn"), 0o600)
	n.dm.Reconcile()
	var p api.Plugin
	waitFor(t, 10*time.Second, "demo held", func() bool {
		for _, x := range n.status(t).Plugins {
			if x.Name == "demo" && x.Held != "" {
				p = x
				return true
			}
		}
		return false
	})
	if len(p.Servers) != 1 || p.Servers[0].State != api.StateHeld || !strings.Contains(p.Held, record) {
		t.Errorf("held plugin in status: %+v", p)
	}
	found := false
	for _, f := range n.status(t).Findings {
		found = found || f.Code == api.CodeRecordUnreadable && f.Subject == "demo" && strings.Contains(f.Message, record)
	}
	if !found {
		t.Error("no record-unreadable finding naming the record")
	}
	if text, isErr := call(t, cs, "demo__echo", map[string]any{"text": "hi"}); !isErr || !strings.Contains(text, "held back") || !strings.Contains(text, "demo/main") {
		t.Errorf("a call of the held plugin's tool answered %q (error %v)", text, isErr)
	}
	os.WriteFile(record, good, 0o600)
	n.dm.Reconcile()
	n.waitState(t, "demo", "main", api.StateUnsandboxed)
	waitFor(t, 10*time.Second, "echo again", func() bool {
		text, isErr := call(t, cs, "demo__echo", map[string]any{"text": "back"})
		return !isErr && text == "back"
	})
}
