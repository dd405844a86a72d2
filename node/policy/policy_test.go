package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

// plugin has one server of each sandbox kind and one hook.
func plugin(name string) *manifest.Manifest {
	return &manifest.Manifest{
		Name: name,
		Servers: []manifest.Server{
			{Name: "health", Command: "h", Sandbox: manifest.SandboxHost, Reason: "reads the host"},
			{Name: "main", Command: "m", Sandbox: manifest.SandboxDefault},
			{Name: "runner", Command: "r", Sandbox: manifest.SandboxOwn},
		},
		Hooks: []manifest.Hook{{Event: "PreToolUse", Command: "x"}},
	}
}

// linuxRoot is a root Linux node at tier 1 with bwrap and gVisor, strict mode.
func linuxRoot() Inputs {
	return Inputs{Manifest: plugin("demo"), Commit: commit, Mode: Strict, OS: "linux", Tier: 1,
		Backend: BackendBwrap, GVisor: true, Root: true, DataDirTraversable: true}
}

func darwinUser() Inputs {
	return Inputs{Manifest: plugin("demo"), Commit: commit, Mode: Strict, OS: "darwin", Tier: 1,
		Backend: BackendSeatbelt}
}

func tier0(in Inputs) Inputs {
	in.Tier, in.Backend, in.GVisor = 0, BackendNone, false
	return in
}

// want is what one row expects of the default server "main" (and the hook, which
// always gets the same decision), the host/own servers and the plugin.
type want struct {
	main      Action
	backend   string
	network   Network
	perPlugin bool
	hostOwn   Action // the sandbox: host and sandbox: own servers
	exempt    bool
	refused   bool // the whole plugin
	build     bool // PackageCode
	findings  []string
	noFinding []string
}

var (
	perPluginUID = PluginUID("demo")
	exemptFlag   = "--plugin-sandbox-exempt demo"
)

func TestDecideMatrix(t *testing.T) {
	tests := []struct {
		name string
		in   Inputs
		want want
	}{
		// §1.2 tier 0: every plugin runs as the node's user, its build included.
		{"tier 0 strict linux runs everything unsandboxed as the node user", tier0(linuxRoot()),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, build: true}},
		{"tier 0 auto linux runs everything unsandboxed", with(tier0(linuxRoot()), func(in *Inputs) { in.Mode = Auto }),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, build: true}},
		{"tier 0 off linux runs everything unsandboxed", with(tier0(linuxRoot()), func(in *Inputs) { in.Mode = Off }),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, build: true}},
		{"tier 0 strict darwin runs everything unsandboxed", tier0(darwinUser()),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, build: true}},
		{"tier 0 non-root linux runs everything unsandboxed", with(tier0(linuxRoot()), func(in *Inputs) { in.Root = false }),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, build: true}},
		{"tier 0 refuses a private candidate", with(tier0(linuxRoot()), func(in *Inputs) { in.Private = true }),
			want{main: Refused, backend: BackendNone, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodePluginRefused}}},
		{"tier 0 refuses a private candidate under off", with(tier0(darwinUser()), func(in *Inputs) { in.Private = true; in.Mode = Off }),
			want{main: Refused, backend: BackendNone, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodePluginRefused}}},
		{"tier 0 refuses a plugin requiring gVisor", with(tier0(linuxRoot()), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, build: true, findings: []string{api.CodeGVisorRequired}}},
		{"tier 0 refuses gVisor even if the probe said it works", with(tier0(linuxRoot()), func(in *Inputs) { in.GVisor = true; in.PluginBackend = BackendGVisor }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, build: true, findings: []string{api.CodeGVisorRequired}}},
		{"tier 0 runs an exempt plugin unsandboxed and says it is exempt", with(tier0(linuxRoot()), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Unsandboxed, backend: BackendNone, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},

		// §1.3 strict.
		{"strict on a root linux node sandboxes with a per-plugin user and proxy-only network", linuxRoot(),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}, noFinding: []string{api.CodeExemptRunning}}},
		{"strict on a non-root linux node sandboxes as the node user", with(linuxRoot(), func(in *Inputs) { in.Root = false }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"strict with an untraversable data folder sandboxes as the node user", with(linuxRoot(), func(in *Inputs) { in.DataDirTraversable = false }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"strict with folders out of the plugin user's reach sandboxes as the node user and says why", with(linuxRoot(), func(in *Inputs) { in.UserUnreachable = "/srv/x is 0700" }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused, api.CodePluginUserFallback}}},
		{"strict on macOS sandboxes with Seatbelt as the node user and says Seatbelt has no limits", darwinUser(),
			want{main: Sandboxed, backend: BackendSeatbelt, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused, api.CodeSeatbeltNoLimits}}},
		{"strict on macOS as root still has no per-plugin user", with(darwinUser(), func(in *Inputs) { in.Root = true; in.DataDirTraversable = true }),
			want{main: Sandboxed, backend: BackendSeatbelt, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"strict on gVisor by default uses gVisor with a per-plugin user", with(linuxRoot(), func(in *Inputs) { in.Backend = BackendGVisor }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},

		// §1.3 auto.
		{"auto on linux sandboxes but keeps the host network with proxy variables", with(linuxRoot(), func(in *Inputs) { in.Mode = Auto }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetHostProxyVars, perPlugin: true, hostOwn: Refused, build: true, findings: []string{api.CodeServerRefused}}},
		{"auto on non-root linux sandboxes as the node user", with(linuxRoot(), func(in *Inputs) { in.Mode = Auto; in.Root = false }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetHostProxyVars, hostOwn: Refused, build: true, findings: []string{api.CodeServerRefused}}},
		{"auto on macOS runs unsandboxed and says so", with(darwinUser(), func(in *Inputs) { in.Mode = Auto }),
			want{main: Unsandboxed, backend: BackendSeatbelt, network: NetHost, hostOwn: Unsandboxed, build: true, findings: []string{api.CodeMacAutoUnsandboxed}, noFinding: []string{api.CodeSeatbeltNoLimits}}},

		// §1.3 off.
		{"off on linux runs unsandboxed as the node user", with(linuxRoot(), func(in *Inputs) { in.Mode = Off }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, build: true, noFinding: []string{api.CodeServerRefused}}},
		{"off on macOS runs unsandboxed as the node user", with(darwinUser(), func(in *Inputs) { in.Mode = Off }),
			want{main: Unsandboxed, backend: BackendSeatbelt, network: NetHost, hostOwn: Unsandboxed, build: true}},

		// §1.3/§1.5 private candidates: always sandboxed, never exempt, proxy network.
		{"private candidate under strict is sandboxed with a per-plugin user", with(linuxRoot(), func(in *Inputs) { in.Private = true }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"private candidate under auto is sandboxed with proxy-only network", with(linuxRoot(), func(in *Inputs) { in.Private = true; in.Mode = Auto }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"private candidate under off is sandboxed with proxy-only network", with(linuxRoot(), func(in *Inputs) { in.Private = true; in.Mode = Off }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"private candidate under auto on macOS is sandboxed with Seatbelt", with(darwinUser(), func(in *Inputs) { in.Private = true; in.Mode = Auto }),
			want{main: Sandboxed, backend: BackendSeatbelt, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}, noFinding: []string{api.CodeMacAutoUnsandboxed}}},
		{"private candidate under off on macOS is sandboxed with Seatbelt", with(darwinUser(), func(in *Inputs) { in.Private = true; in.Mode = Off }),
			want{main: Sandboxed, backend: BackendSeatbelt, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"private candidate is never exempt and the flag is reported ignored", with(linuxRoot(), func(in *Inputs) { in.Private = true; in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeExemptionPrivate, api.CodeServerRefused}, noFinding: []string{api.CodeExemptRunning}}},
		{"private candidate pinned by commit is never exempt either", with(linuxRoot(), func(in *Inputs) {
			in.Private = true
			in.Mode = Off
			in.Exemptions = []Exemption{{Name: "demo", Commit: commit}}
		}),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeExemptionPrivate}}},

		// §1.5 exemptions: NAME and NAME@COMMIT.
		{"NAME exemption runs unsandboxed as the node user and says so", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}, noFinding: []string{api.CodeServerRefused}}},
		{"NAME@COMMIT exemption of the installed commit exempts", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo", Commit: commit}} }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},
		{"NAME@PREFIX of 7 hex digits exempts", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo", Commit: commit[:7]}} }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},
		{"NAME@PREFIX in upper case exempts", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo", Commit: strings.ToUpper(commit[:12])}} }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},
		{"NAME@PREFIX shorter than 7 does not exempt", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo", Commit: commit[:6]}} }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeExemptionCommit, api.CodeServerRefused}, noFinding: []string{api.CodeExemptRunning}}},
		{"NAME@OTHER commit does not exempt and says so", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo", Commit: "fedcba9876543210"}} }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeExemptionCommit, api.CodeServerRefused}, noFinding: []string{api.CodeExemptRunning}}},
		{"NAME@OTHER next to NAME exempts without a mismatch finding", with(linuxRoot(), func(in *Inputs) {
			in.Exemptions = []Exemption{{Name: "demo", Commit: "fedcba9876543210"}, {Name: "demo"}}
		}),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}, noFinding: []string{api.CodeExemptionCommit}}},
		{"an exemption of another plugin changes nothing", with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "other"}, {Name: "demo-x"}} }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}, noFinding: []string{api.CodeExemptionCommit, api.CodeExemptRunning}}},
		{"exemption on macOS runs unsandboxed", with(darwinUser(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Unsandboxed, backend: BackendSeatbelt, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}, noFinding: []string{api.CodeSeatbeltNoLimits}}},
		{"exemption under auto runs unsandboxed", with(linuxRoot(), func(in *Inputs) { in.Mode = Auto; in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Unsandboxed, backend: BackendBwrap, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},

		// §1.8 uid collisions.
		{"a uid collision on a root linux node refuses the plugin", with(linuxRoot(), func(in *Inputs) { in.UIDCollision = "other" }),
			want{main: Refused, backend: BackendBwrap, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodeUIDCollision}}},
		{"a uid collision refuses an exempt plugin too (users are never shared)", with(linuxRoot(), func(in *Inputs) { in.UIDCollision = "other"; in.Exemptions = []Exemption{{Name: "demo"}} }),
			want{main: Refused, backend: BackendBwrap, network: NetNone, hostOwn: Refused, exempt: true, refused: true, build: true, findings: []string{api.CodeUIDCollision}}},
		{"a uid collision on a non-root node does not matter", with(linuxRoot(), func(in *Inputs) { in.UIDCollision = "other"; in.Root = false }),
			want{main: Sandboxed, backend: BackendBwrap, network: NetProxy, hostOwn: Refused, findings: []string{api.CodeServerRefused}, noFinding: []string{api.CodeUIDCollision}}},

		// isolation: gvisor and --plugin-backend NAME=gvisor: never downgraded.
		{"isolation gvisor runs in gVisor where it works", with(linuxRoot(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"isolation gvisor without gVisor is refused, never run on bwrap", with(linuxRoot(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor; in.GVisor = false }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodeGVisorRequired}}},
		{"isolation gvisor on macOS is refused", with(darwinUser(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor; in.GVisor = true }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodeGVisorRequired}}},
		{"isolation gvisor under auto on macOS is refused, not run unsandboxed", with(darwinUser(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor; in.Mode = Auto }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, build: true, findings: []string{api.CodeGVisorRequired}}},
		{"isolation gvisor under off runs in gVisor, not unsandboxed", with(linuxRoot(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor; in.Mode = Off }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetProxy, perPlugin: true, hostOwn: Refused, build: true, findings: []string{api.CodeServerRefused}}},
		{"isolation gvisor under off without gVisor is refused", with(linuxRoot(), func(in *Inputs) {
			in.Manifest.Isolation = manifest.IsolationGVisor
			in.Mode = Off
			in.GVisor = false
		}),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, build: true, findings: []string{api.CodeGVisorRequired}}},
		{"isolation gvisor under auto keeps the host network in gVisor", with(linuxRoot(), func(in *Inputs) { in.Manifest.Isolation = manifest.IsolationGVisor; in.Mode = Auto }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetHostProxyVars, perPlugin: true, hostOwn: Refused, build: true, findings: []string{api.CodeServerRefused}}},
		{"--plugin-backend gvisor runs in gVisor where it works", with(linuxRoot(), func(in *Inputs) { in.PluginBackend = BackendGVisor }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetProxy, perPlugin: true, hostOwn: Refused, findings: []string{api.CodeServerRefused}}},
		{"--plugin-backend gvisor without gVisor is refused", with(linuxRoot(), func(in *Inputs) { in.PluginBackend = BackendGVisor; in.GVisor = false }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodeGVisorRequired}}},
		{"--plugin-backend gvisor under off sandboxes in gVisor", with(linuxRoot(), func(in *Inputs) { in.PluginBackend = BackendGVisor; in.Mode = Off }),
			want{main: Sandboxed, backend: BackendGVisor, network: NetProxy, perPlugin: true, hostOwn: Refused, build: true, findings: []string{api.CodeServerRefused}}},
		{"an exempt plugin requiring gVisor runs unsandboxed (the operator's choice)", with(linuxRoot(), func(in *Inputs) {
			in.Manifest.Isolation = manifest.IsolationGVisor
			in.GVisor = false
			in.Exemptions = []Exemption{{Name: "demo"}}
		}),
			want{main: Unsandboxed, backend: BackendGVisor, network: NetHost, hostOwn: Unsandboxed, exempt: true, build: true, findings: []string{api.CodeExemptRunning}}},
		{"a private candidate requiring gVisor without gVisor is refused", with(linuxRoot(), func(in *Inputs) { in.Private = true; in.PluginBackend = BackendGVisor; in.GVisor = false }),
			want{main: Refused, backend: BackendGVisor, network: NetNone, hostOwn: Refused, refused: true, findings: []string{api.CodeGVisorRequired}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			w := tc.want
			main, ok := d.Server("main")
			if !ok {
				t.Fatalf("no decision for server main: %+v", d.Servers)
			}
			for _, tg := range append([]Target{main}, d.Hooks...) {
				if tg.Action != w.main || tg.Network != w.network || tg.User.PerPlugin != w.perPlugin || tg.Exempt != w.exempt {
					t.Errorf("%s %s: action %s network %s per-plugin %v exempt %v; want %s %s %v %v (reasons %q)",
						tg.Kind, tg.Name, tg.Action, tg.Network, tg.User.PerPlugin, tg.Exempt, w.main, w.network, w.perPlugin, w.exempt, tg.Reasons)
				}
				if tg.Action == Sandboxed && tg.Backend != w.backend {
					t.Errorf("%s %s: backend %s, want %s", tg.Kind, tg.Name, tg.Backend, w.backend)
				}
				if tg.Action != Sandboxed && tg.Backend != BackendNone {
					t.Errorf("%s %s: %s with backend %s", tg.Kind, tg.Name, tg.Action, tg.Backend)
				}
				if len(tg.Reasons) == 0 {
					t.Errorf("%s %s: no reasons", tg.Kind, tg.Name)
				}
			}
			if len(d.Hooks) != 1 || d.Hooks[0].Kind != "hook" {
				t.Errorf("hooks %+v", d.Hooks)
			}
			if d.Backend != w.backend {
				t.Errorf("plugin backend %s, want %s", d.Backend, w.backend)
			}
			if w.perPlugin {
				if main.User.UID != perPluginUID || main.User.GID != perPluginUID || d.User != main.User {
					t.Errorf("user %+v, want uid/gid %d", main.User, perPluginUID)
				}
			} else if main.User.UID != 0 || main.User.Why == "" {
				t.Errorf("node user %+v: want uid 0 (meaning the node's own) and a reason", main.User)
			}
			for _, name := range []string{"health", "runner"} {
				tg, _ := d.Server(name)
				if tg.Action != w.hostOwn {
					t.Errorf("server %s (sandbox: %s): %s, want %s (%q)", name, tg.Declare, tg.Action, w.hostOwn, tg.Reasons)
				}
			}
			if d.Exempt != w.exempt {
				t.Errorf("plugin exempt %v, want %v", d.Exempt, w.exempt)
			}
			if (d.Refused != "") != w.refused {
				t.Errorf("plugin refused %q, want refused=%v", d.Refused, w.refused)
			}
			if d.Build.PackageCode != w.build || d.Build.Reason == "" {
				t.Errorf("build %+v, want package code %v", d.Build, w.build)
			}
			codes := findingCodes(d)
			for _, c := range w.findings {
				if !slices.Contains(codes, c) {
					t.Errorf("no finding %s in %v", c, codes)
				}
			}
			for _, c := range w.noFinding {
				if slices.Contains(codes, c) {
					t.Errorf("unexpected finding %s in %v", c, codes)
				}
			}
			for _, f := range d.Findings {
				if f.Subject == "" || f.Message == "" || f.Severity == "" {
					t.Errorf("incomplete finding %+v", f)
				}
				if _, ok := api.LookupCode(f.Code); !ok {
					t.Errorf("finding code %q is not in api.Codes", f.Code)
				}
			}
		})
	}
}

func with(in Inputs, f func(*Inputs)) Inputs {
	m := *in.Manifest
	in.Manifest = &m
	f(&in)
	return in
}

func findingCodes(d Decision) []string {
	var out []string
	for _, f := range d.Findings {
		out = append(out, f.Code)
	}
	return out
}

func finding(t *testing.T, d Decision, code string) api.Finding {
	t.Helper()
	for _, f := range d.Findings {
		if f.Code == code {
			return f
		}
	}
	t.Fatalf("no finding %s in %v", code, findingCodes(d))
	return api.Finding{}
}

func TestRefusedHostServerNamesTheServerAndTheExactFlag(t *testing.T) {
	d := Decide(linuxRoot())
	for _, name := range []string{"health", "runner"} {
		tg, _ := d.Server(name)
		r := tg.Refusal()
		for _, w := range []string{"server " + name, "plugin demo", exemptFlag, "demo@" + commit} {
			if !strings.Contains(r, w) {
				t.Errorf("refusal of %s %q lacks %q", name, r, w)
			}
		}
	}
	health, _ := d.Server("health")
	if !strings.Contains(health.Refusal(), "sandbox: host") || !strings.Contains(health.Refusal(), `"reads the host"`) {
		t.Errorf("refusal %q does not say sandbox: host and the plugin's reason", health.Refusal())
	}
	var refused []api.Finding
	for _, f := range d.Findings {
		if f.Code == api.CodeServerRefused {
			refused = append(refused, f)
		}
	}
	if len(refused) != 2 || refused[0].Subject != "demo/health" || refused[1].Subject != "demo/runner" {
		t.Fatalf("server-refused findings %+v", refused)
	}
	if refused[0].Message != health.Refusal() || !strings.Contains(refused[0].Fix, "--plugin-sandbox-exempt demo@"+commit) {
		t.Errorf("finding %+v does not carry the refusal and the fix", refused[0])
	}
}

func TestRefusalOfOwnOnMacOSExplainsNesting(t *testing.T) {
	d := Decide(darwinUser())
	tg, _ := d.Server("runner")
	if !strings.Contains(tg.Refusal(), "sandbox: own") || !strings.Contains(tg.Refusal(), "exits 71") {
		t.Errorf("refusal %q", tg.Refusal())
	}
}

func TestPrivateCandidateRefusalSaysItIsNeverExempt(t *testing.T) {
	in := linuxRoot()
	in.Private = true
	d := Decide(in)
	tg, _ := d.Server("health")
	if !strings.Contains(tg.Refusal(), "never exempt") || strings.Contains(tg.Refusal(), "--plugin-sandbox-exempt") {
		t.Errorf("refusal %q", tg.Refusal())
	}
	in.Exemptions = []Exemption{{Name: "demo"}}
	f := finding(t, Decide(in), api.CodeExemptionPrivate)
	if !strings.Contains(f.Message, "ignored") || f.Subject != "demo" {
		t.Errorf("finding %+v", f)
	}
}

func TestExemptionCommitMismatchNamesBothCommitsAndTheFix(t *testing.T) {
	in := linuxRoot()
	in.Exemptions = []Exemption{{Name: "demo", Commit: "fedcba9876543210"}}
	f := finding(t, Decide(in), api.CodeExemptionCommit)
	if !strings.Contains(f.Message, "demo@fedcba9876543210") || !strings.Contains(f.Message, commit[:12]) || !strings.Contains(f.Fix, "--plugin-sandbox-exempt demo@"+commit) {
		t.Errorf("finding %+v", f)
	}
}

func TestExemptFindingNamesTheFlag(t *testing.T) {
	in := linuxRoot()
	in.Exemptions = []Exemption{{Name: "demo", Commit: commit[:7]}}
	d := Decide(in)
	f := finding(t, d, api.CodeExemptRunning)
	if !strings.Contains(f.Message, "--plugin-sandbox-exempt demo@"+commit[:7]) || !strings.Contains(f.Message, "unsandboxed") {
		t.Errorf("finding %+v", f)
	}
	main, _ := d.Server("main")
	if !strings.Contains(strings.Join(main.Reasons, " "), "exempt") {
		t.Errorf("reasons %q do not say exempt", main.Reasons)
	}
}

func TestGVisorRefusalNamesWhoAskedForIt(t *testing.T) {
	in := linuxRoot()
	in.GVisor = false
	in.PluginBackend = BackendGVisor
	if d := Decide(in); !strings.Contains(d.Refused, "--plugin-backend demo=gvisor") {
		t.Errorf("refusal %q", d.Refused)
	}
	in.PluginBackend = ""
	in.Manifest = plugin("demo")
	in.Manifest.Isolation = manifest.IsolationGVisor
	d := Decide(in)
	if !strings.Contains(d.Refused, "isolation: gvisor") || !strings.Contains(d.Refused, "never run on a weaker tier") {
		t.Errorf("refusal %q", d.Refused)
	}
	main, _ := d.Server("main")
	if main.Refusal() != d.Refused {
		t.Errorf("server refusal %q differs from the plugin's %q", main.Refusal(), d.Refused)
	}
}

func TestUserReasonsExplainWhyNoPluginUser(t *testing.T) {
	for name, tc := range map[string]struct {
		in   Inputs
		want string
	}{
		"macOS":         {darwinUser(), "Seatbelt has no per-plugin users"},
		"non-root":      {with(linuxRoot(), func(in *Inputs) { in.Root = false }), "does not run as root"},
		"untraversable": {with(linuxRoot(), func(in *Inputs) { in.DataDirTraversable = false }), "cannot traverse"},
		"unreachable":   {with(linuxRoot(), func(in *Inputs) { in.UserUnreachable = "/x is 0700" }), "/x is 0700"},
		"per-plugin":    {linuxRoot(), "per-plugin user"},
	} {
		if d := Decide(tc.in); !strings.Contains(d.User.Why, tc.want) {
			t.Errorf("%s: user %+v, want a reason containing %q", name, d.User, tc.want)
		}
	}
}

func TestBuildDecisions(t *testing.T) {
	for name, tc := range map[string]struct {
		in   Inputs
		want bool
	}{
		"strict tier 1 runs no package code":        {linuxRoot(), false},
		"strict on macOS runs no package code":      {darwinUser(), false},
		"strict exempt may run package code":        {with(linuxRoot(), func(in *Inputs) { in.Exemptions = []Exemption{{Name: "demo"}} }), true},
		"auto runs package code as the node user":   {with(linuxRoot(), func(in *Inputs) { in.Mode = Auto }), true},
		"off runs package code as the node user":    {with(linuxRoot(), func(in *Inputs) { in.Mode = Off }), true},
		"tier 0 runs package code as the node user": {tier0(linuxRoot()), true},
		"private never runs package code":           {with(linuxRoot(), func(in *Inputs) { in.Private = true }), false},
		"private under off never runs package code": {with(linuxRoot(), func(in *Inputs) { in.Private = true; in.Mode = Off }), false},
		"private exempt never runs package code": {with(linuxRoot(), func(in *Inputs) {
			in.Private = true
			in.Exemptions = []Exemption{{Name: "demo"}}
		}), false},
		"private at tier 0 never runs package code": {with(tier0(linuxRoot()), func(in *Inputs) { in.Private = true }), false},
	} {
		if got := Decide(tc.in).Build; got.PackageCode != tc.want || got.Reason == "" {
			t.Errorf("%s: build %+v, want package code %v", name, got, tc.want)
		}
	}
}

func TestDecideDoesNotChangeItsInputs(t *testing.T) {
	in := linuxRoot()
	in.Exemptions = []Exemption{{Name: "demo", Commit: "ABCDEF0"}}
	before := *in.Manifest
	Decide(in)
	if in.Exemptions[0].Commit != "ABCDEF0" || len(in.Manifest.Servers) != len(before.Servers) || !reflect.DeepEqual(in.Manifest.Servers, before.Servers) {
		t.Errorf("inputs changed: %+v %+v", in.Exemptions, in.Manifest.Servers)
	}
}

func TestPluginUIDIsStableAndInRange(t *testing.T) {
	// FNV-1a 32 of the name, modulo 200_000_000, plus 1_900_000_000: these values
	// are on disk as file owners of installed plugins and must never change.
	golden := map[string]uint32{
		"demo": 2035829814, "host-health": 1927355252, "own-sandbox": 2020795777, "a": 1926002220, "egress-demo": 1914252522,
	}
	for name, uid := range golden {
		if got := PluginUID(name); got != uid {
			t.Errorf("PluginUID(%q) = %d, want %d", name, got, uid)
		}
	}
	for _, name := range []string{"", "x", strings.Repeat("z", 64), "\xff\xff\xff\xff"} {
		if u := PluginUID(name); u < 1_900_000_000 || u >= 1<<31 {
			t.Errorf("PluginUID(%q) = %d out of [1_900_000_000, 2^31)", name, u)
		}
	}
	if UIDBase+UIDSpan > 1<<31 {
		t.Errorf("UIDBase+UIDSpan = %d reaches 2^31", UIDBase+UIDSpan)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []string{"strict", "auto", "off"} {
		if got, err := ParseMode(m); err != nil || string(got) != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	for _, m := range []string{"", "Strict", "none", "on"} {
		if _, err := ParseMode(m); err == nil || !strings.Contains(err.Error(), "--plugin-sandbox") {
			t.Errorf("ParseMode(%q): err %v", m, err)
		}
	}
}
