package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

func TestHookSeesOwnAndAgentCallsOnlyUnlessGranted(t *testing.T) {
	grants := []HookGrant{{Watcher: "audit", Other: "demo"}}
	for _, c := range []struct {
		watcher, owner string
		want           bool
	}{
		{"spy", "spy", true},     // its own tool
		{"spy", "", true},        // the agent's own tool (no plugin's)
		{"spy", "demo", false},   // another plugin's call: no grant
		{"audit", "demo", true},  // granted by name
		{"demo", "audit", false}, // a grant is one way
		{"audit", "notes", false},
		{"", "demo", false}, // no plugin is no watcher
	} {
		if got := HookSees(grants, c.watcher, c.owner); got != c.want {
			t.Errorf("HookSees(%s sees %q) = %v, want %v", c.watcher, c.owner, got, c.want)
		}
	}
	if HookSees(nil, "spy", "demo") {
		t.Error("without grants a plugin's hooks see another's calls")
	}
}

func TestParseHookGrants(t *testing.T) {
	gs, err := ParseHookGrants([]string{"audit=demo, audit=notes", "audit=demo"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []HookGrant{{"audit", "demo"}, {"audit", "notes"}}; !slices.Equal(gs, want) {
		t.Errorf("got %v, want %v", gs, want)
	}
	if got := HooksSeeOf(append(gs, HookGrant{"x", "y"}), "audit"); !slices.Equal(got, []string{"demo", "notes"}) {
		t.Errorf("HooksSeeOf = %v", got)
	}
	for _, bad := range []string{"audit", "audit=*", "*=demo", "Audit=demo", "audit=demo,", "audit=audit", "=demo", "audit=", "a=b=c"} {
		if _, err := ParseHookGrants([]string{bad}); err == nil || !strings.HasPrefix(err.Error(), HookGrantFlag+" ") {
			t.Errorf("%q: %v, want an error naming %s", bad, err, HookGrantFlag)
		}
	}
}

func TestHookGrantFindings(t *testing.T) {
	installed := func(n string) bool { return n == "audit" || n == "demo" }
	fs := HookGrantFindings([]HookGrant{{"audit", "demo"}, {"audit", "gone"}}, installed)
	if len(fs) != 2 {
		t.Fatalf("findings %+v", fs)
	}
	if fs[0].Code != api.CodeHookGrant || fs[0].Severity != api.SevInfo || !strings.Contains(fs[0].Message, "audit see the arguments and results of demo") {
		t.Errorf("granted: %+v", fs[0])
	}
	if fs[1].Code != api.CodeHookGrantUnmatched || fs[1].Severity != api.SevWarning || !strings.Contains(fs[1].Message, "gone") {
		t.Errorf("unmatched: %+v", fs[1])
	}
}

func TestHookTimeoutIsCappedByTheNode(t *testing.T) {
	for _, c := range []struct {
		declared, want time.Duration
		capped         bool
	}{
		{0, HookTimeoutCap, false},
		{10 * time.Second, 10 * time.Second, false},
		{HookTimeoutCap, HookTimeoutCap, false},
		{time.Hour, HookTimeoutCap, true},
		{HookTimeoutCap + time.Millisecond, HookTimeoutCap, true},
	} {
		got, capped := HookTimeout(manifest.Hook{Timeout: c.declared})
		if got != c.want || capped != c.capped {
			t.Errorf("HookTimeout(%s) = %s, %v; want %s, %v", c.declared, got, capped, c.want, c.capped)
		}
	}
	// As loaded: the manifest clamps the duration and keeps the seconds written.
	if got, capped := HookTimeout(manifest.Hook{Timeout: HookTimeoutCap, DeclaredTimeout: 3600}); got != HookTimeoutCap || !capped {
		t.Errorf("a loaded 3600 s hook: %s, capped %v", got, capped)
	}
	in := linuxRoot()
	m := *in.Manifest
	m.Hooks = []manifest.Hook{{Event: "PreToolUse", Command: "x", Timeout: time.Hour}, {Event: "Stop", Command: "y", Timeout: 5 * time.Second}}
	in.Manifest = &m
	d := Decide(in)
	if d.Hooks[0].Timeout != HookTimeoutCap || d.Hooks[1].Timeout != 5*time.Second {
		t.Errorf("hook timeouts %s, %s", d.Hooks[0].Timeout, d.Hooks[1].Timeout)
	}
	var capped []string
	for _, f := range d.Findings {
		if f.Code == api.CodeHookTimeoutCapped {
			capped = append(capped, f.Subject)
		}
	}
	if !slices.Equal(capped, []string{"demo/PreToolUse[0]"}) {
		t.Errorf("hook-timeout-capped findings for %v, want demo/PreToolUse[0]", capped)
	}
}

// A plugin's hooks hold authority over a call of its own tool only, or anywhere
// by the operator's approval; never over the agent's own tools, another plugin's,
// or an event without a tool (docs/promises.md §15).
func TestHookAuthority(t *testing.T) {
	approved := []string{"trusted"}
	for _, c := range []struct {
		watcher, owner string
		want           bool
	}{
		{"alpha", "alpha", true},
		{"alpha", "", false},
		{"alpha", "beta", false},
		{"", "", false},
		{"trusted", "", true},
		{"trusted", "beta", true},
		{"beta", "trusted", false},
	} {
		if got := HookAuthority(approved, c.watcher, c.owner); got != c.want {
			t.Errorf("HookAuthority(%q, owner %q) = %v; want %v", c.watcher, c.owner, got, c.want)
		}
	}
}

// A sandboxed hook run that receives the agent's data has no network unless the
// operator granted its plugin's hooks egress; a run for the plugin's own tool
// keeps the plugin's network (docs/promises.md §16).
func TestHookRunNetwork(t *testing.T) {
	sandboxed := func(n Network) Target {
		return Target{Kind: "hook", Name: "PostToolUse[0]", Action: Sandboxed, Network: n, Reasons: []string{"strict"}}
	}
	for _, c := range []struct {
		name           string
		t              Target
		egress         []string
		watcher, owner string
		want           Network
	}{
		{"agent's tool under strict", sandboxed(NetProxy), nil, "alpha", "", NetIsolated},
		{"agent's tool under auto: not the host network either", sandboxed(NetHostProxyVars), nil, "alpha", "", NetIsolated},
		{"another plugin's tool (granted to see it)", sandboxed(NetProxy), nil, "alpha", "beta", NetIsolated},
		{"its own tool", sandboxed(NetProxy), nil, "alpha", "alpha", NetProxy},
		{"its own tool under auto", sandboxed(NetHostProxyVars), nil, "alpha", "alpha", NetHostProxyVars},
		{"granted egress", sandboxed(NetProxy), []string{"alpha"}, "alpha", "", NetProxy},
		{"another plugin's grant", sandboxed(NetProxy), []string{"beta"}, "alpha", "", NetIsolated},
		{"unsandboxed (exempt, off, tier 0) is the operator's choice", Target{Action: Unsandboxed, Network: NetHost}, nil, "alpha", "", NetHost},
		{"refused stays refused", Target{Action: Refused, Network: NetNone}, nil, "alpha", "", NetNone},
	} {
		got := HookRun(c.t, c.egress, c.watcher, c.owner)
		if got.Network != c.want {
			t.Errorf("%s: network %s; want %s", c.name, got.Network, c.want)
		}
		if c.want == NetIsolated && !strings.Contains(strings.Join(got.Reasons, "; "), HookEgressFlag+" "+c.watcher) {
			t.Errorf("%s: reasons do not name the grant: %q", c.name, got.Reasons)
		}
		if c.t.Action == Sandboxed && len(c.t.Reasons) != 1 {
			t.Errorf("%s: HookRun changed the decision it was given: %q", c.name, c.t.Reasons)
		}
	}
}

func TestHookTrustFindings(t *testing.T) {
	fs := HookTrustFindings([]string{"alpha", "gone"}, []string{"alpha"}, func(n string) bool { return n == "alpha" })
	var codes []string
	for _, f := range fs {
		codes = append(codes, f.Code+" "+f.Subject)
	}
	want := []string{api.CodeHookApproved + " alpha", api.CodeHookTrustUnmatched + " " + HookApproveFlag + " gone", api.CodeHookEgress + " alpha"}
	if !slices.Equal(codes, want) {
		t.Errorf("findings %q; want %q", codes, want)
	}
	if _, err := ParseHookApprove([]string{"alpha,*"}); err == nil {
		t.Error("a wildcard was accepted")
	}
}
