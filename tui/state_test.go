package tui

import (
	"reflect"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
)

func TestWordWrapKeepsFlagsWhole(t *testing.T) {
	flag := "--plugin-sandbox-exempt host-health@9f3b2a1c0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"
	lines := wordWrap("to exempt it, start the node with "+flag+" and restart", 60)
	found := false
	for _, l := range lines {
		if len([]rune(l)) > 60 {
			t.Errorf("line longer than 60: %q", l)
		}
		if strings.Contains(l, "host-health@9f3b2a1c0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a") {
			found = true
		}
	}
	if !found {
		t.Errorf("the NAME@COMMIT was broken across lines: %q", lines)
	}
	if got := wordWrap(strings.Repeat("x", 25), 10); !reflect.DeepEqual(got, []string{"xxxxxxxxxx", "xxxxxxxxxx", "xxxxx"}) {
		t.Errorf("an over-long word: %q", got)
	}
}

// TestApplyEventUnexpected: events the TUI does not expect change nothing and never
// panic — an unknown type, a missing payload, a server or plugin it does not know,
// updates before the first status.
func TestApplyEventUnexpected(t *testing.T) {
	st := loadStatus(t, "tier1.json")
	before := loadStatus(t, "tier1.json")
	for _, ev := range []api.Event{
		{},
		{Type: "bogus"},
		{Type: "status"},
		{Type: "server"},
		{Type: "finding"},
		{Type: "egress"},
		{Type: "server", Server: &api.ServerEvent{Plugin: "nope", Server: "x", State: "running"}},
		{Type: "server", Server: &api.ServerEvent{Plugin: "demo", Server: "nope", State: "running"}},
	} {
		got, what := applyEvent(st, ev)
		if got != st || what != "" {
			t.Errorf("event %+v changed the status (%q)", ev, what)
		}
	}
	if !reflect.DeepEqual(st, before) {
		t.Error("unexpected events modified the status")
	}
	for _, ev := range []api.Event{{Type: "server", Server: &api.ServerEvent{Plugin: "demo", Server: "demo"}}, {Type: "egress", Egress: &api.EgressDecision{}}, {Type: "finding", Finding: &api.Finding{}}} {
		if got, _ := applyEvent(nil, ev); got != nil {
			t.Errorf("an update before any status made one: %+v", got)
		}
	}
}

func TestApplyEvent(t *testing.T) {
	st := loadStatus(t, "tier1.json")
	st, what := applyEvent(st, api.Event{Type: "server", Time: "2026-11-29T11:24:00Z", Server: &api.ServerEvent{Plugin: "dev.oz0-fixtures/egress-demo", Server: "fetcher", State: api.StateCrashed, Detail: "exit status 2"}})
	if s := st.Plugins[3].Servers[0]; s.State != api.StateCrashed || s.Since != "2026-11-29T11:24:00Z" {
		t.Errorf("server event by plugin id not applied: %+v", s)
	}
	if !strings.Contains(what, "egress-demo/fetcher is now crashed: exit status 2") {
		t.Errorf("note %q", what)
	}

	st, _ = applyEvent(st, api.Event{Type: "egress", Egress: &api.EgressDecision{Plugin: "egress-demo", Host: "x.test", Port: 443, Decision: "deny", Rule: "r"}})
	if st.Plugins[3].Denied != 4 || st.Egress.Recent[0].Host != "x.test" {
		t.Errorf("egress denial not counted or not first: denied %d, first %+v", st.Plugins[3].Denied, st.Egress.Recent[0])
	}

	n := len(st.Findings)
	st, _ = applyEvent(st, api.Event{Type: "finding", Time: "2026-11-29T11:25:00Z", Finding: &api.Finding{Code: api.CodeCrashLoop, Severity: api.SevError, Subject: "egress-demo/fetcher", Message: "m"}})
	st, _ = applyEvent(st, api.Event{Type: "finding", Time: "2026-11-29T11:26:00Z", Finding: &api.Finding{Code: api.CodeCrashLoop, Severity: api.SevError, Subject: "egress-demo/fetcher", Message: "m2"}})
	if len(st.Findings) != n+1 {
		t.Fatalf("the same finding twice: %d findings, want %d", len(st.Findings), n+1)
	}
	fs := findingsNewestFirst(st.Findings)
	if fs[0].Subject != "egress-demo/fetcher" || fs[0].Message != "m2" || fs[0].Time != "2026-11-29T11:26:00Z" {
		t.Errorf("newest finding not first: %+v", fs[0])
	}

	next := loadStatus(t, "tier0.json")
	if got, _ := applyEvent(st, api.Event{Type: "status", Status: next}); got != next {
		t.Error("a full status does not replace the model")
	}
}

func TestExemptHint(t *testing.T) {
	st := loadStatus(t, "tier1.json")
	hh := st.Plugins[1]
	h, ok := exemptHint(hh, hh.Servers[0])
	if !ok || h != "--plugin-sandbox-exempt host-health@9f3b2a1c0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a" {
		t.Errorf("hint for the refused host-health: %q %v", h, ok)
	}
	if _, ok := exemptHint(st.Plugins[0], st.Plugins[0].Servers[0]); ok {
		t.Error("a hint for a running server")
	}
	priv := hh
	priv.Private = true
	if h, ok := exemptHint(priv, hh.Servers[0]); ok || !strings.Contains(h, "never exempt") {
		t.Errorf("a private candidate got an exemption flag: %q", h)
	}
	other := hh.Servers[0]
	other.Declared = "default" // refused for another reason: no flag helps
	if _, ok := exemptHint(hh, other); ok {
		t.Error("a flag offered for a refusal no exemption lifts")
	}
}

func TestTenantMatches(t *testing.T) {
	pats := []string{"api.example.com:443", ".example.net", "pypi.org"}
	for host, want := range map[string][]string{
		"api.example.com":  {"api.example.com:443"},
		".cdn.example.net": {".example.net"},
		"cdn.example.net":  {".example.net"},
		"example.net":      nil,
		"allowed.test":     nil,
	} {
		if got := tenantMatches(pats, host); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
	if h := egressHost(".cdn.example.net:80,443 — static files"); h != ".cdn.example.net" {
		t.Errorf("egressHost: %q", h)
	}
}

func TestExemptionWords(t *testing.T) {
	st := loadStatus(t, "tier1.json")
	for _, c := range []struct {
		e       api.Exemption
		warning string
	}{
		{st.Exempt[0], ""},
		{st.Exempt[1], "commit does not match: claude-hooks is installed at 7a6b5c4d3e2f"},
		{st.Exempt[2], "matches no installed plugin"},
		{api.Exemption{Flag: "cand", Plugin: "cand", Matches: "ignored-private"}, "private candidate, never exempt"},
	} {
		_, w := exemptionWords(c.e, st.Plugins)
		if (c.warning == "") != (w == "") || !strings.Contains(w, c.warning) {
			t.Errorf("%s: warning %q, want %q", c.e.Flag, w, c.warning)
		}
	}
	if h := exemptionHint(st.Exempt[1], st.Plugins); h != "--plugin-sandbox-exempt claude-hooks@7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b" {
		t.Errorf("hint for the mismatch: %q", h)
	}
}

// A held plugin and an unresponsive server are what the plugins view shows
// first and in the colours of trouble; the detail says why a plugin is held and
// why and when a server last restarted, with the operator's restarts apart.
func TestHeldAndUnresponsiveAreShown(t *testing.T) {
	held := api.Plugin{Name: "broken", Held: "plugin broken: install record plugins/broken/x.json: does not parse", Servers: []api.Server{{Name: "main", State: api.StateHeld}}}
	frozen := api.Plugin{Name: "frozen", Servers: []api.Server{{Name: "main", State: api.StateUnresponsive, Restarts: 2, OperatorRestarts: 1,
		LastRestart: "unresponsive: it did not answer a ping within 10s (at 2026-12-02T05:00:00Z)"}}}
	ok := api.Plugin{Name: "fine", Servers: []api.Server{{Name: "main", State: api.StateRunning}}}
	if pluginState(held) != api.StateHeld || stateRank(api.StateHeld) <= stateRank(api.StateCrashed) ||
		stateRank(api.StateUnresponsive) <= stateRank(api.StateCrashed) || pluginState(frozen) != api.StateUnresponsive {
		t.Errorf("states: held %q, frozen %q", pluginState(held), pluginState(frozen))
	}
	st := NewStyles(false, true)
	if st.Bad.Render("x") == st.Good.Render("x") {
		t.Fatal("the styles do not colour: this check cannot tell")
	}
	if st.stateStyle(api.StateHeld).Render("x") != st.Bad.Render("x") || st.stateStyle(api.StateUnresponsive).Render("x") != st.Bad.Render("x") {
		t.Error("held or unresponsive not styled as trouble")
	}
	v := newPluginsView(DefaultKeyMap(), st)
	v.SetSize(120, 40)
	v.SetStatus(&api.Status{Plugins: []api.Plugin{held, frozen, ok}})
	text := v.detailText()
	if !strings.Contains(text, "HELD") || !strings.Contains(text, "does not parse") {
		t.Errorf("detail of a held plugin:\n%s", text)
	}
	v.nav.cursor = 3 // frozen/main: broken, broken/main, frozen, frozen/main
	text = v.detailText()
	if !strings.Contains(text, "(+1 by the operator)") || !strings.Contains(text, "did not answer a ping") {
		t.Errorf("detail of an unresponsive server:\n%s", text)
	}
}
