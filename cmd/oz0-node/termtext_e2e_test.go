package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
)

// hostileText is plugin text that, printed raw, sets the window title (OSC 0),
// writes the clipboard (OSC 52), clears the screen (CSI, and its 8-bit C1 form),
// reverses what follows (a bidi override) and forges a line of the node's output.
const hostileText = "A\x1b]0;PWNED-TITLE\x07B\x1b]52;c;cm0gLXJmIH4K\x07C\x1b[2J\u009b31mD\u202eE\r\n  REFUSED: forged"

// terminalActive lists what in out a terminal would act on.
func terminalActive(out string) []string {
	var bad []string
	for i, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			lo := max(0, i-20)
			bad = append(bad, strings.ToValidUTF8(out[lo:min(len(out), i+20)], "?"))
		}
	}
	return bad
}

// hostilePlugin is host-health with hostileText in its description, author, reason
// and its server's environment.
func hostilePlugin(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "hostile-text")
	if _, err := fixtures.Extract("host-health", repo); err != nil {
		t.Fatal(err)
	}
	m := map[string]any{
		"name": "hostile-text", "version": "1.0.0", "description": hostileText,
		"author": map[string]string{"name": hostileText},
		"extensions": map[string]any{"ai.oz0": map[string]any{
			"namespace": "dev.oz0-tests",
			"servers":   map[string]any{"health": map[string]string{"sandbox": "host", "reason": hostileText}},
		}},
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(repo, "plugin.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	servers := map[string]any{
		"health": map[string]any{"command": "python3", "args": []string{"${PLUGIN_ROOT}/server.py", "--tools", "health,whoami"}},
		"second": map[string]any{
			"command": "python3", "args": []string{"${PLUGIN_ROOT}/server.py", "--tools", "echo"},
			"env": map[string]string{"HOSTILE": hostileText},
		},
	}
	b, _ = json.Marshal(servers)
	if err := os.WriteFile(filepath.Join(repo, "mcp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	commitRepo(t, repo)
	return repo
}

// Every CLI print of plugin text goes through termtext: real `oz0-node` processes
// writing to pipes, for plugin install/show/list/lint, sandbox show, status,
// findings and call output. The text stays readable and forges no line.
func TestE2EPluginTextNeverDrivesTheTerminal(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"demo"}, "--backend", backends[0])
	n.stop()
	repo := hostilePlugin(t)

	// A tool's output may span lines; everything else the CLI prints of a plugin
	// stays on the line it belongs to.
	check := func(what string, args ...string) string {
		t.Helper()
		multiline := args[0] == "call"
		cmd := exec.Command(n.bin, append([]string{"--data-dir", n.data}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		for name, s := range map[string]string{"stdout": out.String(), "stderr": errb.String()} {
			if bad := terminalActive(s); len(bad) > 0 {
				t.Errorf("%s: %s carries terminal controls near %q", what, name, bad)
			}
			for _, l := range strings.Split(s, "\n") {
				if !multiline && strings.HasPrefix(strings.TrimSpace(l), "REFUSED: forged") {
					t.Errorf("%s: %s has a line forged by the plugin: %q", what, name, l)
				}
			}
		}
		return out.String() + errb.String()
	}
	check("plugin install", "plugin", "install", repo, "--by", "e2e")
	out := check("plugin show", "plugin", "show", "hostile-text")
	if !strings.Contains(out, "ABCDE") {
		t.Errorf("plugin show lost the readable text:\n%s", out)
	}
	js := check("plugin show --json", "plugin", "show", "hostile-text", "--json")
	var shown struct {
		Manifest struct {
			Description string `json:"description"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal([]byte(js), &shown); err != nil || shown.Manifest.Description != hostileText {
		t.Errorf("plugin show --json: description %q (%v), want the manifest's exactly", shown.Manifest.Description, err)
	}
	check("plugin list", "plugin", "list")
	check("plugin lint", "plugin", "lint", repo)
	check("plugin lint --json", "plugin", "lint", repo, "--json")
	if out := check("sandbox show", "sandbox", "show", "hostile-text", "--server", "second"); !strings.Contains(out, "HOSTILE") {
		t.Errorf("sandbox show does not show the manifest's environment:\n%s", out)
	}

	n.start("--backend", backends[0])
	n.waitState("hostile-text", "health", api.StateRefused)
	n.waitState("demo", "main", api.StateRunning)
	if out := check("status", "status"); !strings.Contains(out, "hostile-text") || !strings.Contains(out, "PWNED-TITLE") {
		t.Errorf("status does not show the refusal's reason:\n%s", out)
	}
	check("status --json", "status", "--json")
	check("findings", "findings")
	check("call of the refused tool", "call", "hostile-text__health")
	out = check("call output", "call", "demo__echo", "--arg", "text="+hostileText)
	if !strings.Contains(out, "ABCDE") {
		t.Errorf("call lost the tool's readable output:\n%s", out)
	}
	check("call --output-json", "call", "demo__echo", "--arg", "text="+hostileText, "--output-json")
}
