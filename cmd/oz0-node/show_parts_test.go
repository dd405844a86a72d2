package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installOnly installs fixtures into a fresh data folder without starting a node.
func installOnly(t *testing.T, names ...string) *e2eNode {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("not tested: git is not installed")
	}
	parent := t.TempDir()
	n := &e2eNode{t: t, bin: buildBinary(t), data: filepath.Join(parent, "data")}
	for _, name := range names {
		repo, _ := gitRepo(t, parent, name)
		if out, err := n.oz("plugin", "install", repo, "--by", "test"); err != nil {
			t.Fatalf("install %s: %v\n%s", name, err, out)
		} else if name == "cc-skills-only" && !strings.Contains(out, "runs here: nothing; its parts (") {
			t.Errorf("install of a skills-only plugin does not say it runs nothing here:\n%s", out)
		} else if name == "needs-config" && !strings.Contains(out, "needs a value before its servers start: oz0-node plugin config needs-config api_token=") {
			t.Errorf("install does not say which value is needed:\n%s", out)
		}
	}
	return n
}

// plugin show says what the node runs and what it does not: parts for the agent
// itself, hooks it refuses and why, the values a plugin asks for (secrets
// redacted), and remote servers with their host.
func TestPluginShowListsEveryPartOfThePlugin(t *testing.T) {
	n := installOnly(t, "cc-skills-only", "cc-hook-types", "needs-config", "remote-mcp")
	show := func(name string) string {
		t.Helper()
		out, err := n.oz("plugin", "show", name)
		if err != nil {
			t.Fatalf("plugin show %s: %v\n%s", name, err, out)
		}
		return out
	}
	for name, wants := range map[string][]string{
		"cc-skills-only": {"runs here:     nothing; its parts (", "not run:       skills", "not run:       commands"},
		"cc-hook-types":  {"hook refused:  Stop", "(type prompt)", "hook refused:  SubagentStop", "(type agent)", "hook refused:  PostToolUse"},
		"needs-config":   {"value api_token:  not set; needed: oz0-node plugin config needs-config api_token=…", "value region:  default: eu-1", "value ${LEVEL}:  not set"},
		"remote-mcp":     {"server stream: remote http at (not known until its values are set)", "value ${STREAM_PORT}:  not set; needed: oz0-node plugin config remote-mcp STREAM_PORT=…"},
	} {
		out := show(name)
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("plugin show %s lacks %q:\n%s", name, w, out)
			}
		}
	}
	const secret = "show-secret-5521"
	for _, kv := range []string{"api_key=" + secret, "STREAM_PORT=8443", "SSE_PORT=9443"} {
		if out, err := n.oz("plugin", "config", "remote-mcp", kv); err != nil {
			t.Fatalf("plugin config: %v\n%s", err, out)
		}
	}
	out := show("remote-mcp")
	for _, w := range []string{"server stream: remote http at remote-a.test:8443", "value api_key:  set: [redacted]", "value ${STREAM_PORT}:  set: [redacted]"} {
		if !strings.Contains(out, w) {
			t.Errorf("plugin show remote-mcp lacks %q:\n%s", w, out)
		}
	}
	// No tenant list here: the remote servers are refused, and show says why.
	if !strings.Contains(out, "refused by the tenant's egress list") {
		t.Errorf("plugin show does not say the tenant list refuses the remote servers:\n%s", out)
	}
	// A plugin of remote servers only has no sandbox to run anything in.
	if out, err := n.oz("exec", "remote-mcp", "--", "true"); err == nil || !strings.Contains(out, "has no servers or hooks to take a sandbox from") {
		t.Errorf("exec in a plugin of remote servers only: %v\n%s", err, out)
	}
	if out, err := n.oz("exec", "remote-mcp", "--server", "stream", "--", "true"); err == nil || !strings.Contains(out, "is remote") {
		t.Errorf("exec in a remote server: %v\n%s", err, out)
	}
	js, _ := n.oz("plugin", "show", "remote-mcp", "--json")
	if strings.Contains(out, secret) || strings.Contains(js, secret) {
		t.Errorf("plugin show prints the secret")
	}
	os.RemoveAll(n.data)
}
