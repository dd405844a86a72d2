package tui

import (
	"image/color"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// TestColoursFollowTheBackground: colours start dark, follow the background the
// terminal reports, and NO_COLOR / --no-color draw no escape at all (nor ask).
func TestColoursFollowTheBackground(t *testing.T) {
	const darkAmber, lightAmber = "38;2;255;175;0m", "38;2;138;90;0m" // "health degraded"
	st := loadStatus(t, "tier1.json")
	m := NewModel(nopSource{}, Options{Now: func() time.Time { return fixedNow }})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	m.Update(eventMsg{gen: m.gen, ev: api.Event{Type: "status", Status: st}})
	if f := m.frame(); !strings.Contains(f, darkAmber) {
		t.Errorf("before the terminal answers, the warning colour is not the dark one:\n%q", f)
	}
	m.Update(tea.BackgroundColorMsg{Color: color.White})
	if f := m.frame(); !strings.Contains(f, lightAmber) || strings.Contains(f, darkAmber) {
		t.Errorf("on a light background, the warning colour is not the light one:\n%q", f)
	}

	t.Setenv("NO_COLOR", "1")
	plain := NewModel(nopSource{}, Options{Now: func() time.Time { return fixedNow }})
	plain.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	plain.Update(eventMsg{gen: plain.gen, ev: api.Event{Type: "status", Status: st}})
	plain.Update(tea.BackgroundColorMsg{Color: color.White})
	if f := plain.frame(); strings.Contains(f, "\x1b") {
		t.Errorf("under NO_COLOR the screen holds an escape:\n%q", f)
	}
}
