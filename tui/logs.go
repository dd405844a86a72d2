package tui

import (
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// maxLogLines bounds the followed log kept in memory.
const maxLogLines = 5000

// logsView shows the log of the server being followed; it stays at the bottom
// while new lines arrive unless the operator scrolled up.
type logsView struct {
	keys   KeyMap
	styles Styles
	w, h   int
	filter string

	plugin, server string
	state          string // following, ended, or what went wrong
	lines          []string
	vp             viewport.Model
}

func newLogsView(k KeyMap, s Styles) *logsView {
	return &logsView{keys: k, styles: s, vp: viewport.New()}
}

func (v *logsView) SetSize(w, h int) {
	v.w, v.h = w, h
	v.vp.SetWidth(w)
	v.vp.SetHeight(max(1, h-1))
	v.render(false)
}

func (v *logsView) Title() string                { return "Log" }
func (v *logsView) Count(*api.Status) string     { return "" }
func (v *logsView) SetStyles(s Styles)           { v.styles = s }
func (v *logsView) Event(api.Event, *api.Status) {}
func (v *logsView) SetFilter(f string)           { v.filter = f; v.render(false) }
func (v *logsView) Back() bool                   { return false }
func (v logsView) Hint() hint                    { return hint{} }

// BackTo is the plugins view, where the log was opened.
func (v *logsView) BackTo() int { return viewPlugins }

// Start clears the pane for a new server's log.
func (v *logsView) Start(plugin, server string) {
	v.plugin, v.server, v.state, v.lines = plugin, server, "connecting", nil
	v.render(true)
}

func (v *logsView) SetState(s string) { v.state = oneLine(s) }

// Append adds lines, following the end if the operator was there.
func (v *logsView) Append(lines ...string) {
	follow := v.vp.AtBottom() || len(v.lines) == 0
	// A log line is the server's own output: inert before it is kept.
	for _, l := range lines {
		v.lines = append(v.lines, oneLine(l))
	}
	if over := len(v.lines) - maxLogLines; over > 0 {
		v.lines = append([]string(nil), v.lines[over:]...)
	}
	v.render(follow)
}

func (v *logsView) render(bottom bool) {
	shown := v.lines
	if v.filter != "" {
		f := strings.ToLower(v.filter)
		shown = nil
		for _, l := range v.lines {
			if strings.Contains(strings.ToLower(l), f) {
				shown = append(shown, l)
			}
		}
	}
	out := make([]string, len(shown))
	for i, l := range shown {
		out[i] = cut(l, v.w)
	}
	v.vp.SetContent(strings.Join(out, "\n"))
	if bottom {
		v.vp.GotoBottom()
	}
}

func (v *logsView) Key(km tea.KeyPressMsg, _ root) tea.Cmd {
	var cmd tea.Cmd
	switch {
	case key.Matches(km, v.keys.Top):
		v.vp.GotoTop()
	case key.Matches(km, v.keys.Bottom):
		v.vp.GotoBottom()
	default:
		v.vp, cmd = v.vp.Update(km)
	}
	return cmd
}

func (v logsView) View() string {
	st := v.styles
	if v.plugin == "" {
		return st.Dim.Render("  no log followed: select a server in the plugins view (1) and press l")
	}
	title := st.Section.Render("log of "+v.plugin+"/"+v.server) + st.Dim.Render(" · "+v.state+" · esc/1 back to plugins")
	if len(v.lines) == 0 {
		return cut(title, v.w) + "\n" + st.Dim.Render("  no lines yet")
	}
	return cut(title, v.w) + "\n" + v.vp.View()
}
