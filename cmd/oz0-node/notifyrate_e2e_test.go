package main

import (
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
)

// --server-notify-rate sets the rate a flooding server is cut to: the finding
// names it, and the running node's configuration carries it.
func TestE2EServerNotifyRateFlag(t *testing.T) {
	n := newE2E(t, []string{"unruly"}, "--backend", backendsForE2E(t)[0], "--server-notify-rate", "7")
	n.waitState("unruly", "main", api.StateRunning)
	if out, err := n.oz("call", "unruly__flood", "--arg", "kind=progress", "--arg", "seconds=2", "--timeout", "60s"); err != nil || !strings.Contains(out, "sent ") {
		t.Fatalf("flood: %v %s", err, out)
	}
	st := n.status()
	if run, ok := config.FromStatus(st); !ok || run.NotifyRate != 7 {
		t.Errorf("the running node's configuration carries notify rate %d (ok %v), want 7", run.NotifyRate, ok)
	}
	found := false
	for _, f := range st.Findings {
		if f.Code == api.CodeNotificationFlood && f.Subject == "unruly/main" {
			found = true
			if !strings.Contains(f.Message, "faster than 7 a second") {
				t.Errorf("the finding does not name the operator's rate: %s", f.Message)
			}
		}
	}
	if !found {
		t.Errorf("no %s finding for unruly/main", api.CodeNotificationFlood)
	}
}

// A rate out of range is a usage error naming the flag, before the node starts.
func TestServerNotifyRateFlagRefusesNegative(t *testing.T) {
	r := cliRun(t, "--data-dir", t.TempDir(), "run", "--server-notify-rate", "-5")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--server-notify-rate") {
		t.Errorf("run --server-notify-rate -5: exit %d, %q; want exit 2 naming the flag", r.code, r.stderr)
	}
}
