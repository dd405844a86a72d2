package tui

import "charm.land/bubbles/v2/key"

// KeyMap is every key the TUI answers to; bubbles/help renders it.
type KeyMap struct {
	Next     key.Binding
	Prev     key.Binding
	View1    key.Binding
	View2    key.Binding
	View3    key.Binding
	View4    key.Binding
	View5    key.Binding
	View6    key.Binding
	View7    key.Binding
	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding
	Enter    key.Binding
	Back     key.Binding
	Filter   key.Binding
	Severity key.Binding
	Denials  key.Binding
	Restart  key.Binding
	Logs     key.Binding
	Once     key.Binding
	Always   key.Binding
	Refuse   key.Binding
	Yes      key.Binding
	No       key.Binding
	Help     key.Binding
	Quit     key.Binding
}

// DefaultKeyMap is the key map described in the help.
func DefaultKeyMap() KeyMap {
	b := func(help, desc string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return KeyMap{
		Next:     b("tab", "next view", "tab"),
		Prev:     b("shift+tab", "previous view", "shift+tab"),
		View1:    b("1", "plugins", "1"),
		View2:    b("2", "findings", "2"),
		View3:    b("3", "exemptions", "3"),
		View4:    b("4", "egress", "4"),
		View5:    b("5", "log", "5"),
		View6:    b("6", "audit", "6"),
		View7:    b("7", "approvals", "7"),
		Up:       b("↑/k", "up", "up", "k"),
		Down:     b("↓/j", "down", "down", "j"),
		PageUp:   b("pgup", "page up", "pgup", "ctrl+b"),
		PageDown: b("pgdn", "page down", "pgdown", "ctrl+f", "space"),
		Top:      b("g/home", "first", "g", "home"),
		Bottom:   b("G/end", "last", "G", "end"),
		Enter:    b("enter", "details", "enter"),
		Back:     b("esc", "back", "esc"),
		Filter:   b("/", "filter", "/"),
		Severity: b("s", "severity filter", "s"),
		Denials:  b("d", "denials only", "d"),
		Restart:  b("r", "restart server", "r"),
		Logs:     b("l", "follow log", "l"),
		Once:     b("o", "allow once", "o"),
		Always:   b("a", "allow always", "a"),
		Refuse:   b("d", "deny", "d"),
		Yes:      b("y", "yes", "y", "Y"),
		No:       b("n", "no", "n", "N", "esc"),
		Help:     b("?", "help", "?"),
		Quit:     b("q", "quit", "q", "ctrl+c"),
	}
}

// Tabs are the keys that select the views, in tab order.
func (k KeyMap) Tabs() []key.Binding {
	return []key.Binding{k.View1, k.View2, k.View3, k.View4, k.View5, k.View6, k.View7}
}

// ShortHelp is the one-line help under every view.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Next, k.Enter, k.Back, k.Filter, k.Restart, k.Logs, k.Help, k.Quit}
}

// FullHelp is the help shown by '?'.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Next, k.Prev, k.View1, k.View2, k.View3, k.View4, k.View5, k.View6, k.View7},
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom},
		{k.Enter, k.Back, k.Filter, k.Severity, k.Denials},
		{k.Once, k.Always, k.Refuse},
		{k.Restart, k.Logs, k.Help, k.Quit},
	}
}
