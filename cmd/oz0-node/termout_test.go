package main

import (
	"errors"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
)

// status and findings print plugin text (server names are free text; reasons,
// subjects, messages and fixes quote manifests) through termtext, each on its line.
func TestStatusAndFindingsPrintPluginTextInert(t *testing.T) {
	evil := "s\x1b]52;c;cm0K\x07\u009b2J\u202e\n  REFUSED: forged"
	st := &api.Status{
		Node:     api.NodeInfo{Version: "dev", Backend: "bwrap", Mode: "strict", NotCovers: []string{evil}},
		Exempt:   []api.Exemption{{Flag: "x", Matches: "name", Detail: evil}},
		Plugins:  []api.Plugin{{Name: "p", Commit: "0123456789abcdef", User: evil, Servers: []api.Server{{Name: evil, State: api.StateRefused, Reasons: []string{evil}}}}},
		Findings: []api.Finding{{Code: "c", Severity: api.SevError, Subject: evil, Message: evil, Fix: evil}},
		Egress:   api.EgressStatus{Recent: []api.EgressDecision{{Decision: "deny", Plugin: "p", Host: evil, Rule: evil}}},
	}
	var b strings.Builder
	printStatus(&b, st)
	printFindings(&b, st.Findings)
	out := b.String()
	if bad := terminalActive(out); len(bad) > 0 {
		t.Errorf("status/findings carry terminal controls near %q", bad)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "REFUSED: forged") {
			t.Errorf("a plugin forged a line: %q", l)
		}
	}
	if !strings.Contains(out, "s") || strings.Count(out, "REFUSED: forged") < 8 {
		t.Errorf("the plugin text is not shown (readably):\n%s", out)
	}
}

func TestPrintfCleansEveryStringArgument(t *testing.T) {
	type kind string
	evil := "a\x1b]0;t\x07b\nc"
	var b strings.Builder
	printf(&b, "%s|%s|%v|%s|%v|%d\n", evil, kind(evil), []string{evil}, errors.New(evil), []kind{kind(evil)}, 7)
	if got, want := b.String(), "ab c|ab c|[ab c]|ab c|[ab c]|7\n"; got != want {
		t.Errorf("printf = %q, want %q", got, want)
	}
}
