package tui

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.help.SetWidth(msg.Width)
		m.layout()
		return m, nil
	case tickMsg:
		m.now = m.opts.Now()
		return m, tick()
	case connectedMsg:
		if msg.gen != m.gen {
			msg.cancel()
			return m, nil
		}
		m.conn, m.connErr, m.streamCancel, m.stream = connLive, nil, msg.cancel, msg.ch
		return m, tea.Batch(waitEvent(msg.gen, msg.ch), m.auditBacklog(msg.gen))
	case auditBacklogMsg:
		if msg.gen == m.gen {
			m.audit.Add(msg.lines...)
		}
		return m, nil
	case answeredMsg:
		if msg.err != nil {
			m.note, m.noteErr = oneLine(fmt.Sprintf("approval %s: %v", msg.id, msg.err)), true
		} else {
			m.note, m.noteErr = fmt.Sprintf("approval %s answered: %s", msg.id, msg.answer), false
		}
		return m, nil
	case connFailedMsg:
		if msg.gen != m.gen {
			return m, nil
		}
		return m, m.lost(msg.err)
	case streamEndedMsg:
		if msg.gen != m.gen {
			return m, nil
		}
		return m, m.lost(errors.New("the node closed the event stream"))
	case retryMsg:
		if msg.gen != m.gen || m.conn != connDown {
			return m, nil
		}
		return m, m.connect()
	case eventMsg:
		if msg.gen != m.gen {
			return m, nil
		}
		m.apply(msg.ev)
		return m, waitEvent(msg.gen, m.stream)
	case restartDoneMsg:
		if msg.err != nil {
			m.note, m.noteErr = oneLine(fmt.Sprintf("restart %s/%s failed: %v", msg.plugin, msg.server, msg.err)), true
		} else {
			m.note, m.noteErr = fmt.Sprintf("restart of %s/%s requested; its state follows live", msg.plugin, msg.server), false
		}
		return m, nil
	case followingMsg:
		if msg.gen != m.followGen {
			msg.cancel()
			return m, nil
		}
		m.followCancel, m.followCh = msg.cancel, msg.ch
		m.logs.SetState("following")
		return m, waitLines(msg.gen, msg.ch)
	case logLinesMsg:
		if msg.gen != m.followGen {
			return m, nil
		}
		if len(msg.lines) > 0 {
			m.logs.Append(msg.lines...)
		}
		if msg.ended {
			m.logs.SetState("the log stream ended (l on the server follows it again)")
			return m, nil
		}
		return m, waitLines(msg.gen, m.followCh)
	case followFailedMsg:
		if msg.gen != m.followGen {
			return m, nil
		}
		m.logs.SetState("not following: " + msg.err.Error())
		m.logs.Append(msg.fallback...)
		return m, nil
	case tea.BackgroundColorMsg:
		if !m.plain {
			m.setStyles(NewStyles(false, msg.IsDark()))
		}
		return m, nil
	case tea.PasteMsg:
		// Pasted text goes into the filter being typed, never acts as keys.
		if m.editing {
			m.input = append(m.input, []rune(oneLine(msg.Content))...)
			m.filters[m.view] = string(m.input)
			m.applyFilter()
		}
		return m, nil
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return m, nil
}

// apply folds an event into the status and hands the event and the result to the
// views.
func (m *Model) apply(ev api.Event) {
	st, what := applyEvent(m.st, ev)
	if ev.Type == "status" && ev.Status != nil {
		m.everLive, m.attempt = true, 0
	}
	m.lastEvent = m.opts.Now()
	for _, v := range m.views {
		v.Event(ev, st)
	}
	if st == nil {
		return
	}
	m.st = st
	if what != "" {
		m.note, m.noteErr = clock(ev.Time)+" "+what, false
		if ev.Time == "" {
			m.note = what
		}
	}
}

// follow starts following a server's log in the log view; the previous one stops.
func (m *Model) follow(plugin, server string) tea.Cmd {
	if m.followCancel != nil {
		m.followCancel()
		m.followCancel = nil
	}
	m.followGen++
	gen, src, ctx := m.followGen, m.src, m.ctx
	m.logs.Start(plugin, server)
	m.view = viewLogs
	return func() tea.Msg {
		fctx, cancel := context.WithCancel(ctx)
		ch, err := src.Follow(fctx, plugin, server)
		if err == nil {
			return followingMsg{gen: gen, ch: ch, cancel: cancel}
		}
		cancel()
		// A node without the follow endpoint still has the last lines.
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		defer lcancel()
		lines, lerr := src.Logs(lctx, plugin, server, followBacklog)
		if lerr != nil {
			lines = nil
		}
		return followFailedMsg{gen: gen, err: err, fallback: lines}
	}
}

// waitLines takes the lines the log stream holds now (at least one), so a burst is
// drawn once.
func waitLines(gen int, ch <-chan string) tea.Cmd {
	return func() tea.Msg {
		l, ok := <-ch
		if !ok {
			return logLinesMsg{gen: gen, ended: true}
		}
		lines := []string{l}
		for len(lines) < 500 {
			select {
			case l, ok := <-ch:
				if !ok {
					return logLinesMsg{gen: gen, lines: lines, ended: true}
				}
				lines = append(lines, l)
				continue
			default:
			}
			break
		}
		return logLinesMsg{gen: gen, lines: lines}
	}
}

func (m *Model) restart(plugin, server string) tea.Cmd {
	src, ctx := m.src, m.ctx
	return func() tea.Msg {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := src.Restart(cctx, plugin, server)
		return restartDoneMsg{plugin: plugin, server: server, err: err}
	}
}

// auditBacklog fetches the audit stream's latest lines once connected; the
// stream's events bring the rest.
func (m *Model) auditBacklog(gen int) tea.Cmd {
	op, ok := m.src.(Operator)
	if !ok {
		return nil
	}
	ctx := m.ctx
	return func() tea.Msg {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lines, err := op.Audit(cctx, 500)
		if err != nil {
			return nil
		}
		return auditBacklogMsg{gen: gen, lines: lines}
	}
}

// askRestart puts the restart of a server to the operator (y or n).
func (m *Model) askRestart(plugin, server string) {
	m.confirm = &restartQuestion{plugin: plugin, server: server}
}

// say sets the status line's note.
func (m *Model) say(note string) { m.note = note }

// answer says it is answering and sends the operator's answer to an approval.
func (m *Model) answer(id, answer string) tea.Cmd {
	m.note, m.noteErr = fmt.Sprintf("answering approval %s: %s…", id, answer), false
	return m.sendAnswer(id, answer)
}

func (m *Model) sendAnswer(id, answer string) tea.Cmd {
	op, ok := m.src.(Operator)
	if !ok {
		return func() tea.Msg {
			return answeredMsg{id: id, answer: answer, err: errors.New("this node cannot be answered from here")}
		}
	}
	ctx := m.ctx
	return func() tea.Msg {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return answeredMsg{id: id, answer: answer, err: op.Answer(cctx, id, answer, "tui")}
	}
}

func (m *Model) setView(v int) {
	m.view = (v + len(m.views)) % len(m.views)
	m.editing = false
}

func (m *Model) applyFilter() {
	m.active().SetFilter(m.filters[m.view])
}

// key handles a key in turn: keys that arrive together come apart, ctrl+c quits,
// an open question or the filter being typed takes the key whole, then the keys of
// every view, then the view shown.
func (m *Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	if cmd, ok := m.splitKey(msg); ok {
		return m, cmd
	}
	if msg.Mod == tea.ModCtrl && msg.Code == 'c' {
		return m, m.quit()
	}
	if m.confirm != nil {
		return m, m.confirmKey(msg)
	}
	if m.editing {
		m.filterKey(msg)
		return m, nil
	}
	m.note = ""
	if cmd, ok := m.globalKey(msg); ok {
		return m, cmd
	}
	return m, m.active().Key(msg, m)
}

// splitKey handles what arrives as one key but is several, one at a time; it
// reports whether msg was such.
func (m *Model) splitKey(msg tea.KeyPressMsg) (tea.Cmd, bool) {
	// Characters that arrive as one key (a script's keys, or a terminal that sends
	// them together) are separate keys outside the filter.
	if !m.editing && msg.Mod == 0 && utf8.RuneCountInString(msg.Text) > 1 {
		var cmds []tea.Cmd
		for _, r := range msg.Text {
			_, cmd := m.key(tea.KeyPressMsg{Code: r, Text: string(r)})
			cmds = append(cmds, cmd)
		}
		return tea.Batch(cmds...), true
	}
	// The TUI binds no alt+ key. A terminal sends Esc as a lone ESC and alt+x as
	// ESC x, so Esc pressed just before another key (within the reader's 50 ms, as
	// a script or a fast typist does) arrives as alt+key: it is Esc, then the key.
	if msg.Mod.Contains(tea.ModAlt) {
		_, esc := m.key(tea.KeyPressMsg{Code: tea.KeyEscape})
		_, cmd := m.key(withoutAlt(msg))
		return tea.Batch(esc, cmd), true
	}
	return nil, false
}

// confirmKey answers the restart question: y restarts, n cancels, any other key
// leaves it open.
func (m *Model) confirmKey(msg tea.KeyPressMsg) tea.Cmd {
	c := *m.confirm
	switch {
	case key.Matches(msg, m.keys.Yes):
		m.confirm = nil
		m.note, m.noteErr = fmt.Sprintf("restarting %s/%s…", c.plugin, c.server), false
		return m.restart(c.plugin, c.server)
	case key.Matches(msg, m.keys.No):
		m.confirm = nil
		m.note, m.noteErr = "restart cancelled", false
	}
	return nil
}

// filterKey edits the filter being typed; the view follows each change.
func (m *Model) filterKey(msg tea.KeyPressMsg) {
	switch {
	case msg.Code == tea.KeyEnter && msg.Mod == 0:
		m.editing = false
	case msg.Code == tea.KeyEscape:
		m.editing, m.input = false, nil
		m.filters[m.view] = ""
		m.applyFilter()
	case msg.Code == tea.KeyBackspace:
		if len(m.input) > 0 {
			m.input = m.input[:len(m.input)-1]
		}
	case msg.Mod == tea.ModCtrl && msg.Code == 'u':
		m.input = nil
	case msg.Text != "" && msg.Mod&^tea.ModShift == 0:
		m.input = append(m.input, []rune(oneLine(msg.Text))...)
	}
	if m.editing {
		m.filters[m.view] = string(m.input)
		m.applyFilter()
	}
}

// globalKey handles the keys every view shares (quit, help, the tabs, the filter,
// Esc); it reports whether msg was one.
func (m *Model) globalKey(msg tea.KeyPressMsg) (tea.Cmd, bool) {
	k := m.keys
	switch {
	case key.Matches(msg, k.Quit):
		return m.quit(), true
	case key.Matches(msg, k.Help):
		m.help.ShowAll = !m.help.ShowAll
		m.layout()
	case key.Matches(msg, k.Next):
		m.setView(m.view + 1)
	case key.Matches(msg, k.Prev):
		m.setView(m.view - 1)
	case key.Matches(msg, k.Filter):
		m.editing, m.input = true, []rune(m.filters[m.view])
	case key.Matches(msg, k.Back):
		m.back()
	default:
		for i, b := range k.Tabs() {
			if key.Matches(msg, b) {
				m.setView(i)
				return nil, true
			}
		}
		return nil, false
	}
	return nil, true
}

// back is Esc: it closes the help, then what the view has open, then clears its
// filter, then leaves the view for the one it returns to.
func (m *Model) back() {
	switch {
	case m.help.ShowAll:
		m.help.ShowAll = false
		m.layout()
	case m.active().Back():
	case m.filters[m.view] != "":
		m.filters[m.view] = ""
		m.applyFilter()
	case m.active().BackTo() != noView:
		m.setView(m.active().BackTo())
	}
}

// withoutAlt is the key pressed after Esc, as the terminal would have sent it alone.
func withoutAlt(msg tea.KeyPressMsg) tea.KeyPressMsg {
	k := tea.KeyPressMsg{Code: msg.Code, Mod: msg.Mod &^ tea.ModAlt, ShiftedCode: msg.ShiftedCode, BaseCode: msg.BaseCode}
	switch {
	case k.Mod == tea.ModShift && k.ShiftedCode != 0:
		k.Text = string(k.ShiftedCode)
	case k.Mod == 0 && k.Code <= unicode.MaxRune && unicode.IsPrint(k.Code):
		k.Text = string(k.Code)
	}
	return k
}

func (m *Model) quit() tea.Cmd {
	m.cancel()
	return tea.Quit
}
