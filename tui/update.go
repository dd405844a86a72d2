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

func (m *Model) setStatus() {
	m.plugins.SetStatus(m.st)
	m.findings.SetStatus(m.st)
	m.exemptions.SetStatus(m.st)
	m.egress.SetStatus(m.st)
	m.approvals.SetStatus(m.st)
}

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

// apply folds an event into the status and hands the result to the views.
func (m *Model) apply(ev api.Event) {
	st, what := applyEvent(m.st, ev)
	if ev.Type == "status" && ev.Status != nil {
		m.everLive, m.attempt = true, 0
	}
	m.lastEvent = m.opts.Now()
	if ev.Type == "audit" && ev.Audit != nil {
		m.audit.Add(*ev.Audit)
	}
	if st == nil {
		return
	}
	m.st = st
	m.setStatus()
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

// answer sends the operator's answer to the approval selected.
func (m *Model) answer(id, answer string) tea.Cmd {
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
	m.view = (v + numViews) % numViews
	m.editing = false
}

func (m *Model) applyFilter() {
	f := m.filters[m.view]
	switch m.view {
	case viewPlugins:
		m.plugins.SetFilter(f)
	case viewFindings:
		m.findings.SetFilter(f)
	case viewExemptions:
		m.exemptions.SetFilter(f)
	case viewEgress:
		m.egress.SetFilter(f)
	case viewLogs:
		m.logs.SetFilter(f)
	case viewAudit:
		m.audit.SetFilter(f)
	case viewApprovals:
		m.approvals.SetFilter(f)
	}
}

func (m *Model) key(msg tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	// Characters that arrive as one key (a script's keys, or a terminal that sends
	// them together) are separate keys outside the filter.
	if !m.editing && msg.Mod == 0 && utf8.RuneCountInString(msg.Text) > 1 {
		var cmds []tea.Cmd
		for _, r := range msg.Text {
			_, cmd := m.key(tea.KeyPressMsg{Code: r, Text: string(r)})
			cmds = append(cmds, cmd)
		}
		return m, tea.Batch(cmds...)
	}
	// The TUI binds no alt+ key. A terminal sends Esc as a lone ESC and alt+x as
	// ESC x, so Esc pressed just before another key (within the reader's 50 ms, as
	// a script or a fast typist does) arrives as alt+key: it is Esc, then the key.
	if msg.Mod.Contains(tea.ModAlt) {
		_, esc := m.key(tea.KeyPressMsg{Code: tea.KeyEscape})
		_, cmd := m.key(withoutAlt(msg))
		return m, tea.Batch(esc, cmd)
	}
	k := m.keys
	ctrl := msg.Mod == tea.ModCtrl
	if ctrl && msg.Code == 'c' {
		return m, m.quit()
	}
	if m.confirm != nil {
		c := *m.confirm
		switch {
		case key.Matches(msg, k.Yes):
			m.confirm = nil
			m.note, m.noteErr = fmt.Sprintf("restarting %s/%s…", c.plugin, c.server), false
			return m, m.restart(c.plugin, c.server)
		case key.Matches(msg, k.No):
			m.confirm = nil
			m.note, m.noteErr = "restart cancelled", false
		}
		return m, nil
	}
	if m.editing {
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
		case ctrl && msg.Code == 'u':
			m.input = nil
		case msg.Text != "" && msg.Mod&^tea.ModShift == 0:
			m.input = append(m.input, []rune(oneLine(msg.Text))...)
		}
		if m.editing {
			m.filters[m.view] = string(m.input)
			m.applyFilter()
		}
		return m, nil
	}
	m.note = ""
	switch {
	case key.Matches(msg, k.Quit):
		return m, m.quit()
	case key.Matches(msg, k.Help):
		m.help.ShowAll = !m.help.ShowAll
		m.layout()
		return m, nil
	case key.Matches(msg, k.Next):
		m.setView(m.view + 1)
		return m, nil
	case key.Matches(msg, k.Prev):
		m.setView(m.view - 1)
		return m, nil
	case key.Matches(msg, k.View1):
		m.setView(viewPlugins)
		return m, nil
	case key.Matches(msg, k.View2):
		m.setView(viewFindings)
		return m, nil
	case key.Matches(msg, k.View3):
		m.setView(viewExemptions)
		return m, nil
	case key.Matches(msg, k.View4):
		m.setView(viewEgress)
		return m, nil
	case key.Matches(msg, k.View5):
		m.setView(viewLogs)
		return m, nil
	case key.Matches(msg, k.View6):
		m.setView(viewAudit)
		return m, nil
	case key.Matches(msg, k.View7):
		m.setView(viewApprovals)
		return m, nil
	case key.Matches(msg, k.Filter):
		m.editing, m.input = true, []rune(m.filters[m.view])
		return m, nil
	case key.Matches(msg, k.Back):
		switch {
		case m.help.ShowAll:
			m.help.ShowAll = false
			m.layout()
		case m.backView():
		case m.filters[m.view] != "":
			m.filters[m.view] = ""
			m.applyFilter()
		case m.view == viewLogs:
			m.setView(viewPlugins)
		}
		return m, nil
	}
	if m.view == viewPlugins && (key.Matches(msg, k.Restart) || key.Matches(msg, k.Logs)) {
		// Handled here, not in a command, so a 'y' typed right after 'r' meets
		// the question.
		p, s, ok := m.plugins.target()
		switch {
		case !ok:
			m.note = "select a server first (a plugin with several servers lists them below it)"
		case key.Matches(msg, k.Restart):
			m.confirm = &restartQuestion{plugin: p.Name, server: s.Name}
		default:
			return m, m.follow(p.Name, s.Name)
		}
		return m, nil
	}
	if m.view == viewApprovals && (key.Matches(msg, k.Once) || key.Matches(msg, k.Always) || key.Matches(msg, k.Refuse)) {
		// One key answers the approval selected.
		a, ok := m.approvals.selected()
		if !ok {
			m.note = "nothing waits for an answer"
			return m, nil
		}
		answer := api.AnswerDeny
		switch {
		case key.Matches(msg, k.Once):
			answer = api.AnswerOnce
		case key.Matches(msg, k.Always):
			answer = api.AnswerAlways
		}
		m.note, m.noteErr = fmt.Sprintf("answering approval %s: %s…", a.ID, answer), false
		return m, m.answer(a.ID, answer)
	}
	var cmd tea.Cmd
	switch m.view {
	case viewPlugins:
		m.plugins, cmd = m.plugins.Update(msg)
	case viewFindings:
		m.findings, cmd = m.findings.Update(msg)
	case viewExemptions:
		m.exemptions, cmd = m.exemptions.Update(msg)
	case viewEgress:
		m.egress, cmd = m.egress.Update(msg)
	case viewLogs:
		m.logs, cmd = m.logs.Update(msg)
	case viewAudit:
		m.audit, cmd = m.audit.Update(msg)
	case viewApprovals:
		m.approvals, cmd = m.approvals.Update(msg)
	}
	return m, cmd
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

func (m *Model) backView() bool {
	switch m.view {
	case viewPlugins:
		return m.plugins.Back()
	case viewFindings:
		return m.findings.Back()
	case viewExemptions:
		return m.exemptions.Back()
	case viewEgress:
		return m.egress.Back()
	case viewAudit:
		return m.audit.Back()
	case viewApprovals:
		return m.approvals.Back()
	}
	return m.logs.Back()
}

func (m *Model) quit() tea.Cmd {
	m.cancel()
	return tea.Quit
}
