package daemon_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/supervise"
)

// A server that crash-loops right after its sandbox denied something gets a
// crash-loop finding naming the denials; older denials and other plugins' are
// left out. The plugin's recent denials also show in its status.
func TestCrashLoopFindingNamesRecentSandboxDenials(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("not tested: the fixture servers need /usr/bin/python3")
	}
	dir := t.TempDir()
	d, _ := datadir.New(dir + "/data")
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	installFixture(t, d, "crashy", 1)
	n := plan.New(d, config.Run{Mode: policy.Off}, probe.Assume("linux", policy.BackendBwrap, false), nil)
	n.Root = false
	now := time.Now().UTC()
	denials := map[string][]api.SandboxDenial{
		"crashy": {
			{Time: now.Format(time.RFC3339Nano), Process: "python3", PID: 7, Operation: "file-read-data", Target: "/opt/homebrew/etc/my.cnf", Count: 1},
			{Time: now.Format(time.RFC3339Nano), Process: "go-helper", PID: 9, Operation: "mach-lookup", Target: "com.apple.trustd.agent", Count: 1, Hint: "grant it with --plugin-tls-trustd crashy"},
			{Time: now.Add(-time.Hour).Format(time.RFC3339Nano), Process: "python3", PID: 6, Operation: "mach-lookup", Target: "com.apple.old", Count: 1},
		},
		"demo": {{Time: now.Format(time.RFC3339Nano), Process: "node", PID: 8, Operation: "network-outbound", Target: "1.2.3.4:443", Count: 1}},
	}
	dm := daemon.New(daemon.Config{Node: n, Version: "test",
		Supervise: supervise.Options{MinBackoff: 30 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CrashLoop: 3, CrashWindow: 30 * time.Second},
		Denials:   func(p string) []api.SandboxDenial { return denials[p] }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dm.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var f api.Finding
	waitFor(t, 20*time.Second, "crash-loop finding", func() bool {
		st, err := api.NewClient(d.Control()).Status(context.Background())
		if err != nil {
			return false
		}
		for _, x := range st.Findings {
			if x.Code == api.CodeCrashLoop && x.Subject == "crashy/flaky" {
				f = x
				return true
			}
		}
		return false
	})
	if !strings.Contains(f.Message, "denied just before: file-read-data /opt/homebrew/etc/my.cnf (python3)") {
		t.Errorf("crash-loop finding does not name the denial: %s", f.Message)
	}
	if strings.Contains(f.Message, "com.apple.old") || strings.Contains(f.Message, "1.2.3.4") {
		t.Errorf("crash-loop finding names an old or another plugin's denial: %s", f.Message)
	}
	if !strings.Contains(f.Fix, "sandbox show crashy") || !strings.Contains(f.Fix, "grant it with --plugin-tls-trustd crashy") {
		t.Errorf("fix does not point at the profile: %s", f.Fix)
	}
	st, _ := api.NewClient(d.Control()).Status(context.Background())
	for _, p := range st.Plugins {
		if p.Name == "crashy" && len(p.SandboxDenials) != 3 {
			t.Errorf("crashy's status denials: %+v", p.SandboxDenials)
		}
	}
}
