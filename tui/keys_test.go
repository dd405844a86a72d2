package tui

import (
	"io"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
)

// TestKeysThroughTheTerminalReader feeds bytes as a terminal sends them through
// bubbletea's own input reader: keys that arrive in one read act one by one, and an
// Esc followed at once by a key (which the reader decodes as alt+key) is Esc, then
// that key; a bracketed paste is filter text, never keys.
func TestKeysThroughTheTerminalReader(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	rec := &recorder{Model: NewModel(NewSocketSource(sock), Options{NoColor: true, Socket: sock})}
	inR, inW := io.Pipe()
	p := tea.NewProgram(rec, tea.WithInput(inR), tea.WithOutput(io.Discard), tea.WithWindowSize(120, 40), tea.WithoutSignals())
	done := make(chan error, 1)
	go func() { _, err := p.Run(); done <- err }()
	t.Cleanup(func() {
		p.Kill()
		inW.Close()
	})
	rec.waitFor(t, 5*time.Second, "● live")

	type step struct {
		bytes string
		want  func(string) bool
		what  string
	}
	for _, s := range []step{
		{"4", func(f string) bool { return hasRow(f, "[4 Egress") }, "4 opens the egress view"},
		{"1gjjj", func(f string) bool { return hasRow(f, "[1 Plugins") && hasRow(f, ">", "health", "refused") }, `"1gjjj" in one read selects host-health/health`},
		{"\r", func(f string) bool { return hasRow(f, "Server health  REFUSED") }, "enter opens its detail"},
		{"\x1bj", func(f string) bool {
			return !hasRow(f, "Details  (esc closes") && hasRow(f, ">", "crashy", "backing-off")
		}, "ESC j closes the detail, then moves down"},
		{"/cr", func(f string) bool { return hasRow(f, "/cr█") }, "/ starts a filter"},
		{"\x1bj", func(f string) bool { return !hasRow(f, "filter:") && !hasRow(f, "/cr") && hasRow(f, "[1 Plugins") }, "ESC j clears the filter"},
		{" ", func(f string) bool { return hasRow(f, ">", "api", "refused") }, "space pages down to the last row"},
		// A paste is text for the filter (its control characters dropped), never keys:
		// the q in it does not quit.
		{"/\x1b[200~cr\x1b[2Jq\x1b[201~", func(f string) bool { return hasRow(f, "/cr", "q█") && !strings.Contains(f, "\x1b") }, "a paste goes into the filter"},
		{"\x15crash\r", func(f string) bool {
			return hasRow(f, "filter: crash") && hasRow(f, "crashy", "backing-off") && !hasRow(f, "host-health")
		}, "ctrl+u clears the typed filter, enter keeps the new one"},
	} {
		if _, err := inW.Write([]byte(s.bytes)); err != nil {
			t.Fatal(err)
		}
		var last string
		deadline := time.Now().Add(3 * time.Second)
		for {
			if f := rec.take(); len(f) > 0 {
				last = f[len(f)-1]
			}
			if last != "" && s.want(last) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after %q the screen is:\n%s", s.what, s.bytes, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	inW.Write([]byte("q"))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the TUI ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("q did not end the TUI")
	}
}
