package tui

import (
	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"
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

// NewStyles builds the styles from one renderer, so the colour profile chosen for
// the output (or forced to plain text) applies to all of them.
func NewStyles(r *lipgloss.Renderer) Styles {
	s := func() lipgloss.Style { return r.NewStyle() }
	red := lipgloss.AdaptiveColor{Light: "#B00020", Dark: "#FF5F5F"}
	amber := lipgloss.AdaptiveColor{Light: "#8A5A00", Dark: "#FFAF00"}
	green := lipgloss.AdaptiveColor{Light: "#1B7F3B", Dark: "#5FD787"}
	dim := lipgloss.AdaptiveColor{Light: "#6C6C6C", Dark: "#8A8A8A"}
	accent := lipgloss.AdaptiveColor{Light: "#005F87", Dark: "#5FAFFF"}
	return Styles{
		Title:     s().Bold(true),
		Label:     s().Foreground(dim),
		Dim:       s().Foreground(dim),
		Banner:    s().Bold(true).Foreground(lipgloss.Color("#FFFFFF")).Background(red),
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
	case "crashed", "backing-off":
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
