package backenddarwin

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/manifest"
)

// testdata/denials.ndjson holds kernel violation reports written by hand in the
// shape `log stream --style ndjson` prints (not recorded on a Mac): ours, a forged
// one from a user process, another app's, and a plugin trying to pin its denial
// on another plugin.
func TestParseDenialsAttributesEachToItsPlugin(t *testing.T) {
	raw, err := os.ReadFile("testdata/denials.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	log := NewDenialLog(10)
	var got []Denial
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		if d, ok := ParseDenial(line); ok {
			got = append(got, d)
			log.Add(d)
		}
	}
	want := []Denial{
		{Plugin: "demo", Process: "python3.12", PID: 4242, Count: 1, Operation: "file-read-data", Target: "/Users/dev/.ssh/id_ed25519"},
		{Plugin: "demo", Process: "node", PID: 4300, Count: 1, Operation: "network-outbound", Target: "93.184.216.34:443"},
		{Plugin: "egress-demo", Process: "mcp-go-server", PID: 4410, Count: 3, Operation: "mach-lookup", Target: TrustDService},
		{Plugin: "claude-hooks", Process: "Google Chrome Helper (Renderer)", PID: 4501, Count: 1, Operation: "file-write-create", Target: "/Users/dev/Library/Application Support/oz0-node/homes/demo"},
		// The path carried another plugin's tag; the report's own last line names evil.
		{Plugin: "evil", Process: "sh", PID: 4600, Count: 1, Operation: "file-read-data", Target: `/Users/dev/x\noz0-sandbox:victim`},
		{Plugin: "demo", Process: "sysctl", PID: 4603, Count: 1, Operation: "sysctl-read", Target: "kern.bootargs"},
		{Plugin: "demo", Process: "node", PID: 4300, Count: 1, Operation: "process-fork"},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d denials, want %d:\n%+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Time.IsZero() {
			t.Errorf("denial %d: no time", i)
		}
		g.Time = time.Time{}
		if g != w {
			t.Errorf("denial %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if r := log.Recent("victim"); len(r) != 0 {
		t.Errorf("denials counted against a plugin that caused none: %+v", r)
	}
	r := log.Recent("demo")
	if len(r) != 4 || r[0].Operation != "process-fork" || r[3].Target != "/Users/dev/.ssh/id_ed25519" {
		t.Errorf("demo's recent denials, newest first: %+v", r)
	}
	if first := got[0].Time.UTC().Format(time.RFC3339Nano); first != "2026-12-01T15:02:11.104233Z" {
		t.Errorf("time %s", first)
	}
}

func TestDenialLogKeepsTheNewest(t *testing.T) {
	l := NewDenialLog(2)
	for i := range 5 {
		l.Add(Denial{Plugin: "demo", PID: i})
	}
	if r := l.Recent("demo"); len(r) != 2 || r[0].PID != 4 || r[1].PID != 3 {
		t.Errorf("recent %+v, want PIDs 4, 3", r)
	}
}

func TestLogStreamArgs(t *testing.T) {
	a := strings.Join(LogStreamArgs(), " ")
	for _, want := range []string{"stream", "--style ndjson", "processID == 0", `senderImagePath ENDSWITH "/Sandbox"`, `"` + Tag + `"`} {
		if !strings.Contains(a, want) {
			t.Errorf("log stream arguments %q lack %q", a, want)
		}
	}
}

func FuzzParseDenial(f *testing.F) {
	raw, err := os.ReadFile("testdata/denials.ndjson")
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		d, ok := ParseDenial(line)
		if !ok {
			return
		}
		if !manifest.ValidName(d.Plugin) || d.Operation == "" || strings.Contains(d.Plugin, "\n") {
			t.Fatalf("accepted %+v from %q", d, line)
		}
	})
}

// A denied trust daemon tells the operator which grant would allow it; nothing
// else gets advice the node cannot stand behind.
func TestDenialHint(t *testing.T) {
	d := Denial{Plugin: "go-tool", Operation: "mach-lookup", Target: TrustDService}
	if h := d.Hint(); !strings.Contains(h, "--plugin-tls-trustd go-tool") {
		t.Errorf("hint %q", h)
	}
	for _, o := range []Denial{{Plugin: "x", Operation: "mach-lookup", Target: "com.apple.system.logger"}, {Plugin: "x", Operation: "file-read-data", Target: TrustDService}} {
		if h := o.Hint(); h != "" {
			t.Errorf("%+v: hint %q, want none", o, h)
		}
	}
}
