// Package tui is oz0-node's live terminal UI: it follows the node's control-API event
// stream and shows plugins and their servers, findings, exemptions and egress
// decisions, so an operator can troubleshoot a node from a terminal.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"charm.land/bubbles/v2/help"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// Options configure the TUI.
type Options struct {
	In  io.Reader // default os.Stdin
	Out io.Writer // default os.Stdout
	// NoColor renders plain text; NO_COLOR in the environment does the same.
	NoColor bool
	// Socket and DataDir name the node in messages ("start it with …").
	Socket  string
	DataDir string
	// Now is the clock (uptime, countdowns); tests fix it.
	Now func() time.Time
	// AltScreen uses the terminal's alternate screen.
	AltScreen bool
}

// The views' places in Model.views, in tab order; keys 1–7 select them.
const (
	viewPlugins = iota
	viewFindings
	viewExemptions
	viewEgress
	viewLogs
	viewAudit
	viewApprovals
)

// Connection states.
const (
	connConnecting = iota
	connLive
	connDown
)

// The size drawn at until the terminal tells its own.
const (
	firstWidth  = 80
	firstHeight = 24
)

// Back-off between reconnection attempts: doubling from the first to the last.
const (
	backoffFirst = 250 * time.Millisecond
	backoffMax   = 5 * time.Second
)

// Messages.
type (
	connectedMsg struct {
		gen    int
		ch     <-chan api.Event
		cancel context.CancelFunc
	}
	connFailedMsg struct {
		gen int
		err error
	}
	eventMsg struct {
		gen int
		ev  api.Event
	}
	streamEndedMsg struct{ gen int }
	retryMsg       struct{ gen int }
	tickMsg        time.Time
	restartDoneMsg struct {
		plugin, server string
		err            error
	}
	followingMsg struct {
		gen    int
		ch     <-chan string
		cancel context.CancelFunc
	}
	logLinesMsg struct {
		gen   int
		lines []string
		ended bool
	}
	followFailedMsg struct {
		gen      int
		err      error
		fallback []string
	}
	auditBacklogMsg struct {
		gen   int
		lines []api.AuditRecord
	}
	answeredMsg struct {
		id, answer string
		err        error
	}
)

// restartQuestion is the restart waiting for the operator's y or n.
type restartQuestion struct{ plugin, server string }

// Model is the TUI's root model: it owns the connection and the status, and fans
// sizes, status updates and keys out to the views.
type Model struct {
	opts   Options
	src    Source
	keys   KeyMap
	styles Styles
	plain  bool // no colour: NoColor or NO_COLOR
	help   help.Model

	ctx    context.Context
	cancel context.CancelFunc

	w, h  int
	viewH int // the height the views were last given
	now   time.Time
	st    *api.Status
	view  int

	// views are the tabs, in order; the log and the audit views are also held
	// by their type, for the lines the root fetches for them.
	views []view
	logs  *logsView
	audit *auditView

	conn         int
	connErr      error
	everLive     bool
	attempt      int
	retryAt      time.Time
	gen          int
	stream       <-chan api.Event
	streamCancel context.CancelFunc
	lastEvent    time.Time

	editing bool
	input   []rune
	filters []string // per view

	confirm *restartQuestion
	note    string
	noteErr bool

	followGen    int
	followCancel context.CancelFunc
	followCh     <-chan string
}

// NewModel returns the TUI's model reading the node through src.
func NewModel(src Source, opts Options) *Model {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	plain := opts.NoColor || os.Getenv("NO_COLOR") != ""
	keys := DefaultKeyMap()
	// Dark until the terminal says otherwise (most terminals are; one that never
	// answers keeps these).
	styles := NewStyles(plain, true)
	h := help.New()
	h.Styles = styles.Help
	ctx, cancel := context.WithCancel(context.Background())
	logs, audit := newLogsView(keys, styles), newAuditView(keys, styles)
	views := []view{
		viewPlugins:    newPluginsView(keys, styles),
		viewFindings:   newFindingsView(keys, styles),
		viewExemptions: newExemptionsView(keys, styles),
		viewEgress:     newEgressView(keys, styles),
		viewLogs:       logs,
		viewAudit:      audit,
		viewApprovals:  newApprovalsView(keys, styles, opts.Now),
	}
	return &Model{
		opts: opts, src: src, keys: keys, styles: styles, plain: plain, help: h,
		ctx: ctx, cancel: cancel, now: opts.Now(),
		views: views, logs: logs, audit: audit, filters: make([]string, len(views)),
		w: firstWidth, h: firstHeight,
	}
}

// setStyles hands new styles (the terminal's background became known) to every view.
func (m *Model) setStyles(s Styles) {
	m.styles, m.help.Styles = s, s.Help
	for _, v := range m.views {
		v.SetStyles(s)
	}
}

// active is the view shown.
func (m *Model) active() view { return m.views[m.view] }

// Close ends the event stream and any followed log.
func (m *Model) Close() {
	m.cancel()
}

// Run opens the TUI on the node's control socket until the operator quits or ctx ends.
func Run(ctx context.Context, socket string, opts Options) error {
	// A terminal's own size replaces this one; an output that is no terminal has
	// none, and is drawn at the model's first size.
	popts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithWindowSize(firstWidth, firstHeight)}
	// Without In, bubbletea reads the terminal itself (and opens /dev/tty when
	// stdin is piped).
	if opts.In != nil {
		popts = append(popts, tea.WithInput(opts.In))
	}
	if opts.Out != nil {
		popts = append(popts, tea.WithOutput(opts.Out))
	}
	opts.Socket = socket
	m := NewModel(NewSocketSource(socket), opts)
	defer m.Close()
	_, err := tea.NewProgram(m, popts...).Run()
	if err != nil && !(errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil) {
		return fmt.Errorf("tui: %w", err)
	}
	return nil
}

func (m *Model) Init() tea.Cmd {
	if m.plain {
		return tea.Batch(m.connect(), tick())
	}
	// Colours follow the terminal's background: ask it (only the TUI ever does).
	return tea.Batch(m.connect(), tick(), tea.RequestBackgroundColor)
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// connect opens the event stream; the generation tells a stale stream's messages
// from the current one's.
func (m *Model) connect() tea.Cmd {
	m.gen++
	gen, ctx, src := m.gen, m.ctx, m.src
	m.conn = connConnecting
	return func() tea.Msg {
		sctx, cancel := context.WithCancel(ctx)
		ch, err := src.Events(sctx)
		if err != nil {
			cancel()
			return connFailedMsg{gen: gen, err: err}
		}
		return connectedMsg{gen: gen, ch: ch, cancel: cancel}
	}
}

// waitEvent is the one place data comes from: it blocks on the stream for the next
// event — no polling.
func waitEvent(gen int, ch <-chan api.Event) tea.Cmd {
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return streamEndedMsg{gen: gen}
		}
		return eventMsg{gen: gen, ev: ev}
	}
}

// lost marks the connection down and schedules the next attempt with back-off.
func (m *Model) lost(err error) tea.Cmd {
	if m.streamCancel != nil {
		m.streamCancel()
		m.streamCancel = nil
	}
	m.conn, m.connErr = connDown, err
	d := backoffFirst << min(m.attempt, 6)
	if d > backoffMax {
		d = backoffMax
	}
	m.attempt++
	m.now = m.opts.Now()
	m.retryAt = m.now.Add(d)
	gen := m.gen
	return tea.Tick(d, func(time.Time) tea.Msg { return retryMsg{gen: gen} })
}
