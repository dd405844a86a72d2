package tui

import (
	"context"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"oz0.ai/node/node/api"
)

// nopSource is a node that never answers; the tests below feed the model directly.
type nopSource struct{}

func (nopSource) Events(context.Context) (<-chan api.Event, error) { return nil, api.ErrNotRunning }
func (nopSource) Restart(context.Context, string, string) error    { return api.ErrNotRunning }
func (nopSource) Logs(context.Context, string, string, int) ([]string, error) {
	return nil, api.ErrNotRunning
}
func (nopSource) Follow(context.Context, string, string) (<-chan string, error) {
	return nil, api.ErrNotRunning
}

// TestOddSizesAndModels: every view at tiny, odd and large sizes, with an empty
// status, a tier-0 and a tier-1 one, in every state of the detail pane and filter,
// draws exactly the terminal's height and never panics.
func TestOddSizesAndModels(t *testing.T) {
	models := []*api.Status{{}, loadStatus(t, "tier0.json"), loadStatus(t, "tier1.json"),
		{Plugins: []api.Plugin{{Name: "bare"}}, Exempt: []api.Exemption{{}}, Findings: []api.Finding{{}}, Egress: api.EgressStatus{Recent: []api.EgressDecision{{}}}}}
	keys := [][]string{nil, {"enter"}, {"j", "j", "j", "enter", "G"}, {"2", "s"}, {"3", "j"}, {"4", "d"}, {"5"}, {"?"}, {"/", "x", "y"}, {"r"}, {"l"}}
	for _, size := range [][2]int{{1, 1}, {10, 5}, {40, 12}, {80, 24}, {81, 25}, {200, 60}} {
		for _, st := range models {
			for _, ks := range keys {
				m := NewModel(nopSource{}, Options{NoColor: true, Now: func() time.Time { return fixedNow }})
				m.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
				m.Update(eventMsg{gen: m.gen, ev: api.Event{Type: "status", Status: st}})
				for _, k := range ks {
					m.Update(keyMsg(k))
				}
				m.Update(eventMsg{gen: m.gen, ev: api.Event{Type: "server", Server: &api.ServerEvent{Plugin: "bare", Server: "x"}}})
				m.Update(connFailedMsg{gen: m.gen, err: api.ErrNotRunning})
				out := m.frame()
				lines := splitLines(out)
				if len(lines) != size[1] {
					t.Errorf("%dx%d keys %v: %d lines", size[0], size[1], ks, len(lines))
				}
				for _, l := range lines {
					if w := ansi.StringWidth(l); w > size[0] {
						t.Errorf("%dx%d keys %v: a line %d wide: %q", size[0], size[1], ks, w, l)
						break
					}
				}
			}
		}
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
