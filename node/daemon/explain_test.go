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
	} {
		got := strings.Join(crashCauses([]string{"starting", tc.line}, dir, "p"), "; ")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q: causes %q, want %q", tc.line, got, tc.want)
		}
	}
	if got := crashCauses([]string{"listening", "Traceback (most recent call last):", "ValueError: bad config"}, dir, "p"); len(got) != 0 {
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
	got := egressDenials(recent, "p", "s", now.Add(-time.Minute))
	want := []string{
		"egress refused pkgs.example.com:443 by the plugin's manifest and the tenant list (2 times)",
		"egress refused api.example.com:443 by the tenant list",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("denials:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
