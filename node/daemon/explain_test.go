package daemon

import (
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// What real tools print when a sandbox refuses them is read into a cause an
// operator can act on; lines that say nothing of the kind add nothing.
func TestCrashCauses(t *testing.T) {
	dir := "/var/lib/oz0-node/plugins/p/0123abc"
	for _, tc := range []struct {
		line, want string
	}{
		{"touch: cannot touch '" + dir + "/cache.db': Read-only file system", "shows read-only"},
		{"Error: EROFS: read-only file system, mkdir '" + dir + "/.venv'", "use ${CLAUDE_PLUGIN_DATA}"},
		{"Error: Could not find Chrome (ver. 131.0.6778.85). This can occur if either", "--plugin-ro-path p=/opt/google/chrome"},
		{"browserType.launch: Executable doesn't exist at /root/.cache/ms-playwright/chromium-1134/chrome-linux/chrome", "it looked for a browser"},
		{"Error: Could not find Google Chrome executable for channel 'stable' at:", "it looked for a browser"},
		{"OSError: [Errno 30] Read-only file system: '/usr/lib/x'", "it wrote to a read-only place"},
		{"sh: 1: rg: not found", "command rg was not found in its sandbox: the sandbox's root is an allowlist"},
		{"bash: line 1: socat: command not found", "command socat was not found"},
		{"bwrap: execvp uv: No such file or directory", "command uv was not found"},
		{"Error: spawn chromium ENOENT", "command chromium was not found"},
		{`exec: "git": executable file not found in $PATH`, "command git was not found"},
		{"env: ‘uvx’: No such file or directory", "command uvx was not found"},
		{"env: 'npx': No such file or directory", "command npx was not found"},
		{"docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?", "starting the daemon does not help; the operator can run the plugin exempt (--plugin-sandbox-exempt p)"},
		{"Error: Cannot find module '" + dir + "/dist/servers/kb.js'", "it starts dist/servers/kb.js, which the plugin as installed does not have"},
		{"Error: Cannot find module 'express'", "it requires the npm package express, which is not installed for it"},
		{"ModuleNotFoundError: No module named 'mcp'", "it imports the Python module mcp, which is not installed for it"},
		{"ModuleNotFoundError: No module named 'yaml.cyaml'", "the Python module yaml,"},
	} {
		got := strings.Join(crashCauses([]string{"starting", tc.line}, dir, "p", false), "; ")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q: causes %q, want %q", tc.line, got, tc.want)
		}
	}
	if got := crashCauses([]string{"listening", "Traceback (most recent call last):", "ValueError: bad config", "Error: Cannot find module './local'"}, dir, "p", false); len(got) != 0 {
		t.Errorf("no known cause, yet: %q", got)
	}
}

// The refusals of that server (and of its plugin as a whole) within the window
// are named, counted, with the lists that refused them; allowed connections,
// other plugins and other servers, and older refusals are not.
func TestEgressDenials(t *testing.T) {
	now := time.Now().UTC()
	at := func(ago time.Duration) string { return now.Add(-ago).Format(time.RFC3339Nano) }
	recent := []api.EgressDecision{
		{Time: at(time.Second), Plugin: "p", Server: "s", Host: "pkgs.example.com", Port: 443, Decision: "deny", Rule: "manifest+tenant"},
		{Time: at(2 * time.Second), Plugin: "p", Server: "s", Host: "pkgs.example.com", Port: 443, Decision: "deny", Rule: "manifest+tenant"},
		{Time: at(3 * time.Second), Plugin: "p", Host: "api.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(time.Second), Plugin: "p", Server: "s", Host: "ok.example.com", Port: 443, Decision: "allow"},
		{Time: at(time.Second), Plugin: "p", Server: "other", Host: "x.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(time.Second), Plugin: "q", Server: "s", Host: "y.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(time.Hour), Plugin: "p", Server: "s", Host: "old.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
	}
	got := egressDenials(recent, "p", "s", now.Add(-time.Minute), nil)
	want := []string{
		"egress refused pkgs.example.com:443 by the plugin's manifest and the tenant list (2 times) — a plugin reaches only the hosts its manifest declares (extensions.\"ai.oz0\".egress, which Claude Code manifests do not carry), so no tenant line lets it through: its author declares pkgs.example.com, or the operator runs it exempt (--plugin-sandbox-exempt p)",
		"egress refused api.example.com:443 by the tenant list",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("denials:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A crash-loop's cause is what holds now: a host the tenant list refused and
// allows now (the operator added the line), or one allowed since, is no longer
// named as refused; a refusal by the manifest still holds whatever the tenant
// list says. A remote server's host allowed but unreachable is named as such.
func TestEgressDenialsSayWhatHoldsNow(t *testing.T) {
	now := time.Now().UTC()
	at := func(ago time.Duration) string { return now.Add(-ago).Format(time.RFC3339Nano) }
	recent := []api.EgressDecision{
		{Time: at(9 * time.Second), Plugin: "p", Server: "s", Host: "mcp.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(8 * time.Second), Plugin: "p", Server: "s", Host: "mcp.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(7 * time.Second), Plugin: "p", Server: "s", Host: "api.example.com", Port: 443, Decision: "deny", Rule: "tenant"},
		{Time: at(time.Second), Plugin: "p", Server: "s", Host: "api.example.com", Port: 443, Decision: "allow"},
		{Time: at(time.Second), Plugin: "p", Server: "s", Host: "pkgs.example.com", Port: 443, Decision: "deny", Rule: "manifest+tenant"},
	}
	allows := func(host string, port int) bool { return true }
	got := strings.Join(egressDenials(recent, "p", "s", now.Add(-time.Minute), allows), "\n")
	if !strings.HasPrefix(got, "egress refused pkgs.example.com:443 by the plugin's manifest and the tenant list") || strings.Contains(got, "mcp.example.com") || strings.Contains(got, "api.example.com") {
		t.Errorf("causes:\n%s", got)
	}
	got = strings.Join(egressDenials(recent, "p", "s", now.Add(-time.Minute), func(string, int) bool { return false }), "\n")
	if !strings.Contains(got, "egress refused mcp.example.com:443 by the tenant list (2 times)") || strings.Contains(got, "api.example.com") {
		t.Errorf("causes while the tenant list still refuses:\n%s", got)
	}
	line := `server p/s: connect to remote http server at mcp.example.com:443: calling "initialize": sending "initialize": rejected by transport: Post "https://mcp.example.com/mcp": egress proxy refused (502): oz0 egress proxy: mcp.example.com:443 is allowed but could not be reached: resolve mcp.example.com: lookup mcp.example.com on 10.0.0.53:53: no such host`
	if got := strings.Join(crashCauses([]string{line}, "/d", "p", true), "; "); got != "egress to mcp.example.com is allowed, but it could not be reached (resolve mcp.example.com: lookup mcp.example.com on 10.0.0.53:53: no such host): the node's own network or DNS does not reach it" {
		t.Errorf("unreachable: %q", got)
	}
	// A local tool printing the same words is not believed.
	if got := crashCauses([]string{"oz0 egress proxy: evil.example is allowed but could not be reached: x"}, "/d", "p", false); len(got) != 0 {
		t.Errorf("a local tool's own line named a cause: %q", got)
	}
}
