package tui

import (
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// view is one tab of the TUI. The root model holds the views in tab order and
// reaches each through these methods alone, so a new view is a new type and one
// line in NewModel, never a case in the root's key, event or drawing code.
type view interface {
	// Title is the view's name on its tab; Count is the figure the tab shows after
	// it, from the node's status ("(3)", "(2 denied)"), or "" for none.
	Title() string
	Count(st *api.Status) string
	// SetSize gives the view the cells between the tabs and the footer.
	SetSize(w, h int)
	SetStyles(s Styles)
	// Event is one event of the node's stream, with the status as it stands after
	// it (nil until the first full status arrives).
	Event(ev api.Event, st *api.Status)
	// SetFilter narrows what the view lists to what matches f ("" shows all).
	SetFilter(f string)
	// Key handles a key the root model did not. What reaches past the view (a
	// restart, a followed log, an answer) it asks of the root through r.
	Key(km tea.KeyPressMsg, r root) tea.Cmd
	// Back closes what the view has open (a detail pane) and reports whether
	// there was something; BackTo is the view Esc goes to once nothing is left to
	// close or clear, noView to stay.
	Back() bool
	BackTo() int
	// Hint is the line of advice under the view.
	Hint() hint
	View() string
}

// noView is BackTo's answer for a view Esc does not leave.
const noView = -1

// root is what a view may ask of the root model: the work that reaches the node
// or outlives the view, and the note on the status line.
type root interface {
	// askRestart puts the restart question to the operator; their y or n
	// reaches the root before any view.
	askRestart(plugin, server string)
	// follow opens the server's log in the log view.
	follow(plugin, server string) tea.Cmd
	// answer sends the operator's answer to an approval.
	answer(id, answer string) tea.Cmd
	// say sets the status line's note.
	say(note string)
}
