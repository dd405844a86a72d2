package tui

import (
	"charm.land/bubbles/v2/help"
	"charm.land/lipgloss/v2"
)

// Styles holds every lipgloss style the TUI uses. Colour only ever repeats what the
// text already says (DENY, REFUSED, "> " for the cursor), so a terminal without
// colour, or NO_COLOR, loses nothing.
type Styles struct {
	Title     lipgloss.Style
	Label     lipgloss.Style
	Dim       lipgloss.Style
	Banner    lipgloss.Style // node not running, tier 0, connection lost
	WarnLine  lipgloss.Style
	TabActive lipgloss.Style
	TabIdle   lipgloss.Style
	ColHead   lipgloss.Style
	Selected  lipgloss.Style
	Good      lipgloss.Style // running, allow, live
	Warn      lipgloss.Style // refused, exempt, warnings
	Bad       lipgloss.Style // crashed, deny, critical
	Section   lipgloss.Style
	Hint      lipgloss.Style
	Status    lipgloss.Style
	Error     lipgloss.Style
	Prompt    lipgloss.Style
	Help      help.Styles
}

// NewStyles builds the styles for a dark or light background. Under plain
// (NO_COLOR, --no-color) every style is empty: the screen is text alone, with no
// colour and no attributes either.
func NewStyles(plain, dark bool) Styles {
	s := lipgloss.NewStyle
	if plain {
		return Styles{}
	}
	ld := lipgloss.LightDark(dark)
	c := lipgloss.Color
	red := ld(c("#B00020"), c("#FF5F5F"))
	amber := ld(c("#8A5A00"), c("#FFAF00"))
	green := ld(c("#1B7F3B"), c("#5FD787"))
	dim := ld(c("#6C6C6C"), c("#8A8A8A"))
	accent := ld(c("#005F87"), c("#5FAFFF"))
	return Styles{
		Title:     s().Bold(true),
		Label:     s().Foreground(dim),
		Dim:       s().Foreground(dim),
		Banner:    s().Bold(true).Foreground(c("#FFFFFF")).Background(red),
		WarnLine:  s().Foreground(amber),
		TabActive: s().Bold(true).Foreground(accent).Underline(true),
		TabIdle:   s().Foreground(dim),
		ColHead:   s().Bold(true).Foreground(dim),
		Selected:  s().Reverse(true),
		Good:      s().Foreground(green),
		Warn:      s().Foreground(amber),
		Bad:       s().Bold(true).Foreground(red),
		Section:   s().Bold(true).Foreground(accent),
		Hint:      s().Foreground(accent),
		Status:    s().Foreground(dim),
		Error:     s().Foreground(red),
		Prompt:    s().Bold(true),
		Help: help.Styles{
			Ellipsis:       s().Foreground(dim),
			ShortKey:       s().Bold(true),
			ShortDesc:      s().Foreground(dim),
			ShortSeparator: s().Foreground(dim),
			FullKey:        s().Bold(true),
			FullDesc:       s().Foreground(dim),
			FullSeparator:  s().Foreground(dim),
		},
	}
}

// stateStyle colours a server state by how much it should worry the operator.
func (st Styles) stateStyle(state string) lipgloss.Style {
	switch state {
	case "running", "sandboxed":
		return st.Good
	case "crashed", "backing-off", "unresponsive", "held":
		return st.Bad
	case "refused", "exempt-running", "unsandboxed-running", "unsandboxed", "starting":
		return st.Warn
	}
	return st.Dim
}

// sevStyle colours a finding's severity.
func (st Styles) sevStyle(sev string) lipgloss.Style {
	switch sev {
	case "critical", "error":
		return st.Bad
	case "warning":
		return st.Warn
	}
	return st.Dim
}
