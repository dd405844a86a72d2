package plan

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/userconf"
)

const (
	commitA = "0123456789abcdef0123456789abcdef01234567"
	commitB = "89abcdef0123456789abcdef0123456789abcdef"
)

// dataFolder is a data folder with fixture plugins installed at commitA the way
// an install leaves them (files in place, then activated).
func dataFolder(t *testing.T, plugins ...string) datadir.Dir {
	t.Helper()
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(os.Geteuid() == 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range plugins {
		installFixture(t, d, name, commitA)
	}
	return d
}

func installFixture(t *testing.T, d datadir.Dir, name, commit string) {
	t.Helper()
	if _, err := fixtures.Extract(name, d.PluginCommit(name, commit)); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// strictNode is a Linux node at tier 1 on bwrap in strict mode, as `run` builds it
// after probing.
func strictNode(d datadir.Dir, cfg config.Run) *Node {
	cfg.DataDir, cfg.Mode = d.Root, policy.Strict
	n := New(d, cfg, probe.Assume("linux", policy.BackendBwrap, false), nil)
	return n
}

func planAll(t *testing.T, n *Node) (map[string]*Plugin, []api.Finding) {
	t.Helper()
	all, errs := installed.List(n.Dir)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ps, findings := n.Plan(all)
	out := map[string]*Plugin{}
	for _, p := range ps {
		out[p.Installed.Name] = p
	}
	return out, findings
}

func envOf(s *sandbox.Spec) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// From a real data folder the plan builds each server's and hook's sandbox: the
// manifest's command with its placeholders pointing into the installed commit and
// the plugin's home, the installed folder read-only and the home writable, every
// other installed plugin's folder and home denied (its own never), and the egress
// endpoint of that server (or, for hooks, the plugin's own).
func TestPlanBuildsSpecsFromTheInstalledFolder(t *testing.T) {
	d := dataFolder(t, "demo", "claude-hooks", "egress-split")
	n := strictNode(d, config.Run{})
	sockets := Proxy{Sockets: true}
	ps, findings := planAll(t, n)
	if len(ps) != 3 {
		t.Fatalf("planned %d plugins, want 3 (findings %+v)", len(ps), findings)
	}

	demo := ps["demo"]
	s, tg, err := demo.ServerSpec("main", sockets)
	if err != nil {
		t.Fatal(err)
	}
	dir := d.PluginCommit("demo", commitA)
	if tg.Action != policy.Sandboxed || s.Backend != policy.BackendBwrap || s.Network != policy.NetProxy {
		t.Errorf("demo/main: %s on %q with network %q, want sandboxed on bwrap through the proxy", tg.Action, s.Backend, s.Network)
	}
	if want := []string{"python3", dir + "/server.py", "--tools", "echo,add,whoami,read"}; !slices.Equal(s.Argv, want) {
		t.Errorf("argv %q, want %q", s.Argv, want)
	}
	if s.PluginDir != dir || s.Home != d.Home("demo") || s.DataDir != d.Root || s.Dir != dir || s.Server != "main" || s.Commit != commitA {
		t.Errorf("spec folders %q %q %q %q, server %q commit %q", s.PluginDir, s.Home, s.DataDir, s.Dir, s.Server, s.Commit)
	}
	if !slices.Contains(s.Mounts, sandbox.Mount{Source: d.View("demo", commitA), Dest: dir, Writable: true}) || !slices.Contains(s.Mounts, sandbox.Mount{Source: d.Home("demo"), Dest: d.Home("demo"), Writable: true}) {
		t.Errorf("mounts %+v: want the plugin's writable view at the commit folder's path and the home writable", s.Mounts)
	}
	if slices.ContainsFunc(s.Mounts, func(m sandbox.Mount) bool { return m.Source == dir }) {
		t.Errorf("mounts %+v: the installed commit itself is bound", s.Mounts)
	}
	for _, other := range []string{"claude-hooks", "egress-split"} {
		if !slices.Contains(s.Deny, d.Plugin(other)) || !slices.Contains(s.Deny, d.Home(other)) {
			t.Errorf("deny %q lacks %s's folder or home", s.Deny, other)
		}
	}
	if slices.Contains(s.Deny, d.Plugin("demo")) || slices.Contains(s.Deny, d.Home("demo")) || s.Deny[0] != d.Root || !slices.Contains(s.Deny, d.Key()) {
		t.Errorf("deny %q: want the data folder first and the key, never the plugin's own places", s.Deny)
	}
	if s.Proxy == nil || s.Proxy.SocketDir != d.EgressServerSocketDir("demo", "main") {
		t.Errorf("proxy %+v: want the server's own endpoint %s", s.Proxy, d.EgressServerSocketDir("demo", "main"))
	}

	hooks := ps["claude-hooks"]
	ns, _, err := hooks.ServerSpec("notes", sockets)
	if err != nil {
		t.Fatal(err)
	}
	if got := envOf(ns)["NOTES_DIR"]; got != d.Home("claude-hooks")+"/notes" {
		t.Errorf("NOTES_DIR=%q: ${CLAUDE_PLUGIN_DATA} must be the plugin's home", got)
	}
	// A run for a call of the plugin's own tool keeps the plugin's egress.
	hs, ht, err := hooks.HookSpec(0, "claude-hooks", sockets)
	if err != nil {
		t.Fatal(err)
	}
	hdir := d.PluginCommit("claude-hooks", commitA)
	if want := []string{"/bin/sh", "-c", hdir + "/hooks/guard.sh"}; hs.Kind != "hook" || ht.Kind != "hook" || !slices.Equal(hs.Argv, want) {
		t.Errorf("hook 0: kind %q argv %q, want a hook running %q", hs.Kind, hs.Argv, want)
	}
	if ht.Timeout != 10*time.Second {
		t.Errorf("hook 0 timeout %v, want the manifest's 10 s", ht.Timeout)
	}
	if hs.Proxy == nil || hs.Proxy.SocketDir != d.EgressSocketDir("claude-hooks") {
		t.Errorf("hook proxy %+v: want the plugin's own endpoint", hs.Proxy)
	}
	// A run for the agent's own tool receives the agent's data: no network at
	// all, nothing bound, no proxy variables (docs/promises.md §16).
	is, it, err := hooks.HookSpec(0, "", sockets)
	if err != nil {
		t.Fatal(err)
	}
	if it.Network != policy.NetIsolated || is.Network != policy.NetIsolated || is.Proxy != nil || is.Bridge != "" {
		t.Errorf("hook run on the agent's data: network %s, proxy %+v, bridge %q; want isolated with nothing to connect to", is.Network, is.Proxy, is.Bridge)
	}
	for _, kv := range is.Env {
		if strings.Contains(strings.ToLower(kv), "proxy") {
			t.Errorf("hook run on the agent's data has %s", kv)
		}
	}
	if _, _, err := hooks.HookSpec(5, "", sockets); err == nil {
		t.Error("a hook the manifest does not have got a spec")
	}
	if _, _, err := hooks.ServerSpec("nope", sockets); err == nil {
		t.Error("a server the manifest does not have got a spec")
	}

	// exec takes the named server's sandbox, or the first server's.
	split := ps["egress-split"]
	es, _, err := split.ExecSpec("beta", []string{"/bin/sh"}, sockets)
	if err != nil {
		t.Fatal(err)
	}
	if es.Kind != "exec" || es.Server != "beta" || es.Proxy == nil || es.Proxy.SocketDir != d.EgressServerSocketDir("egress-split", "beta") || !slices.Equal(es.Argv, []string{"/bin/sh"}) {
		t.Errorf("exec in beta: kind %q server %q proxy %+v argv %q", es.Kind, es.Server, es.Proxy, es.Argv)
	}
	if split.ExecServer("") != "alpha" {
		t.Errorf("exec without a server takes %q, want the first, alpha", split.ExecServer(""))
	}
	if _, _, err := split.ExecSpec("gamma", []string{"/bin/sh"}, sockets); err == nil {
		t.Error("exec in a server the plugin does not have was accepted")
	}
}

// Nothing is cached from install time: a new active commit, or a value the
// operator sets, applies at the next plan of that plugin.
func TestPlanFollowsWhatIsInstalledAndConfiguredNow(t *testing.T) {
	d := dataFolder(t, "demo", "needs-config")
	n := strictNode(d, config.Run{})
	if _, findings := planAll(t, n); len(findings) == 0 {
		t.Fatal("needs-config planned without a finding")
	}

	installFixture(t, d, "demo", commitB)
	p, err := n.One("demo")
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := p.ServerSpec("main", Proxy{})
	if err != nil {
		t.Fatal(err)
	}
	if s.PluginDir != d.PluginCommit("demo", commitB) || s.Commit != commitB || p.Decision.Commit != commitB {
		t.Errorf("after activating %s: plugin folder %s, commit %s", commitB[:7], s.PluginDir, s.Commit)
	}

	p, err = n.One("needs-config")
	if err != nil {
		t.Fatal(err)
	}
	if _, tg, err := p.ServerSpec("main", Proxy{}); err == nil || tg.Action != policy.Refused || !strings.Contains(tg.Refusal(), "api_token") {
		t.Fatalf("without its token: %s %q (%v), want refused naming api_token", tg.Action, tg.Refusal(), err)
	}
	const token = "tok-5f1e-secret"
	if err := userconf.Save(d, "needs-config", userconf.Values{"api_token": token}); err != nil {
		t.Fatal(err)
	}
	p, err = n.One("needs-config")
	if err != nil {
		t.Fatal(err)
	}
	s, tg, err := p.ServerSpec("main", Proxy{})
	if err != nil {
		t.Fatalf("with its token: %v (%s)", err, tg.Refusal())
	}
	env := envOf(s)
	// The token is sensitive: the sandboxed server holds its sentinel
	// (docs/promises.md §17).
	sentinel := egressrule.Sentinel("needs-config", "main", "api_token")
	if env["SERVICE_TOKEN"] != sentinel || env["SERVICE_REGION"] != "eu-1" || env["SERVICE_LEVEL"] != "basic" {
		t.Errorf("env %v: want the token's sentinel, the region's default and the ${VAR:-default}", env)
	}
	// What the node shows never carries the secret.
	shown := p.Shown().Manifest.Server("main")
	if shown.Env["SERVICE_TOKEN"] != sentinel || shown.Env["SERVICE_REGION"] != "eu-1" {
		t.Errorf("shown env %v: want the token's sentinel and the public region kept", shown.Env)
	}
	if got := p.Redact("call failed: Bearer " + token); strings.Contains(got, token) {
		t.Errorf("Redact left the token: %q", got)
	}
}

// A manifest that no longer loads, and an exemption naming no installed plugin,
// are findings; the other plugins are planned all the same.
func TestPlanFindings(t *testing.T) {
	d := dataFolder(t, "demo", "crashy")
	if err := os.WriteFile(filepath.Join(d.PluginCommit("crashy", commitA), "plugin.json"), []byte(`{"name": "crashy", "mcpServers": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := strictNode(d, config.Run{Exemptions: []policy.Exemption{{Name: "ghost"}}})
	ps, findings := planAll(t, n)
	if ps["demo"] == nil || ps["crashy"] != nil {
		t.Errorf("planned %v: want demo only", slices.Sorted(maps.Keys(ps)))
	}
	var codes []string
	for _, f := range findings {
		codes = append(codes, f.Code+" "+f.Subject)
	}
	for _, want := range []string{api.CodeManifestInvalid + " crashy", api.CodeExemptionUnmatched + " ghost"} {
		if !slices.Contains(codes, want) {
			t.Errorf("findings %q lack %q", codes, want)
		}
	}
}

// A remote server runs no plugin code, so it has no sandbox; its URL's host
// becomes its egress entry (and the plugin's), narrowed to its port.
func TestPlanRemoteServerEgressIsItsURL(t *testing.T) {
	d := dataFolder(t, "remote-mcp")
	if err := userconf.Save(d, "remote-mcp", userconf.Values{"api_key": "k", "STREAM_PORT": "8080", "SSE_PORT": "8081", "DEAD_PORT": "9"}); err != nil {
		t.Fatal(err)
	}
	p, err := strictNode(d, config.Run{}).One("remote-mcp")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.ServerSpec("stream", Proxy{}); err == nil || !strings.Contains(err.Error(), "remote") {
		t.Errorf("remote server spec: %v, want none", err)
	}
	if _, _, err := p.ExecSpec("stream", []string{"/bin/sh"}, Proxy{}); err == nil {
		t.Error("exec in a remote server's sandbox was accepted")
	}
	want := manifest.EgressEntry{Host: "remote-a.test", Ports: []int{8080}, Reason: "remote MCP server stream"}
	s := p.Manifest.Server("stream")
	if len(s.Egress) != 1 || s.Egress[0].Host != want.Host || !slices.Equal(s.Egress[0].Ports, want.Ports) {
		t.Errorf("server egress %+v, want %+v", s.Egress, want)
	}
	if !slices.ContainsFunc(p.Manifest.Egress, func(e manifest.EgressEntry) bool { return e.Host == "remote-b.test" }) {
		t.Errorf("plugin egress %+v lacks the SSE server's host", p.Manifest.Egress)
	}
}
