package tui

import (
	"errors"
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// footerLines is the hint line and the status line under every view.
const footerLines = 2

// layout gives each view the space the header, tabs, footer and help leave.
func (m *Model) layout() {
	m.viewH = m.contentHeight()
	for _, v := range m.views {
		v.SetSize(m.w, m.viewH)
	}
}

func (m *Model) contentHeight() int {
	return max(3, m.h-len(m.header())-1-footerLines-len(m.helpLines()))
}

func (m *Model) helpLines() []string {
	return strings.Split(m.help.View(m.keys), "\n")
}

// View is the screen for bubbletea, on the alternate screen when asked.
func (m *Model) View() tea.View {
	v := tea.NewView(m.frame())
	v.AltScreen = m.opts.AltScreen
	return v
}

// frame draws the whole screen: header, tabs, the active view, hint, status, help.
func (m *Model) frame() string {
	// The header can change height (a banner comes or goes): keep the views' sizes
	// in step before drawing them.
	if h := m.contentHeight(); h != m.viewH {
		m.layout()
	}
	var out []string
	out = append(out, m.header()...)
	out = append(out, m.tabs())
	out = append(out, fitHeight(strings.Split(m.active().View(), "\n"), m.contentHeight())...)
	out = append(out, m.hintLine(), m.statusLine())
	out = append(out, m.helpLines()...)
	out = fitHeight(out, m.h)
	for i, l := range out {
		out[i] = strings.TrimRight(cut(l, m.w), " ")
	}
	return strings.Join(out, "\n")
}

// header is the node line, the tier and what it does not cover, exemptions,
// labels, and above them a banner when something is badly wrong.
func (m *Model) header() []string {
	out := m.connectionLines()
	if m.st == nil {
		return out
	}
	out = append(out, m.statusBanners()...)
	out = append(out, m.nodeLine(), m.tierLine())
	out = append(out, m.notCoveredLines()...)
	return append(out, m.exemptionLines()...)
}

// banner renders s across the screen in the banner style, wrapped.
func (m *Model) banner(s string) []string {
	var out []string
	for _, l := range wrap(s, m.w, "") {
		out = append(out, m.styles.Banner.Render(fit(l, m.w)))
	}
	return out
}

// connectionLines is the banner of a node that cannot be read (not running, an
// error, the connection lost), with how to start it and when the next attempt
// is, or the line saying the TUI is connecting.
func (m *Model) connectionLines() []string {
	start := "oz0-node run"
	if m.opts.DataDir != "" {
		start += " --data-dir " + m.opts.DataDir
	}
	socket := m.opts.Socket
	if socket == "" {
		socket = "the control socket"
	}
	retry := ""
	if m.conn == connDown {
		if d := m.retryAt.Sub(m.now); d > 0 {
			retry = fmt.Sprintf("; retrying in %s", humanDuration(d+999_999_999))
		} else {
			retry = "; retrying"
		}
	}
	notRunning := m.connErr != nil && errors.Is(m.connErr, api.ErrNotRunning)
	connErr := ""
	if m.connErr != nil {
		connErr = oneLine(m.connErr.Error())
	}
	switch {
	case m.conn == connDown && !m.everLive && notRunning:
		return m.banner(fmt.Sprintf("NODE NOT RUNNING: nothing answers on %s. Start it with: %s%s", socket, start, retry))
	case m.conn == connDown && !m.everLive:
		return m.banner(fmt.Sprintf("CANNOT READ THE NODE: %s%s", connErr, retry))
	case m.conn == connDown:
		msg := fmt.Sprintf("CONNECTION LOST (%s): showing the status as of %s%s (attempt %d)", connErr, m.lastEvent.UTC().Format("15:04:05"), retry, m.attempt)
		if notRunning {
			msg += ". Start the node with: " + start
		}
		return m.banner(msg)
	case m.conn == connConnecting && m.st == nil:
		return []string{m.styles.Dim.Render(cut("connecting to "+socket+"…", m.w))}
	}
	return nil
}

// statusBanners are what the status says is badly wrong: no sandbox at all, or
// requests waiting for the operator's answer.
func (m *Model) statusBanners() []string {
	var out []string
	if m.st.Node.Tier == 0 {
		out = append(out, m.banner("TIER 0 — NO PLUGIN SANDBOX: every plugin runs as the node's user, builds too")...)
	}
	if k := len(m.st.Approvals); k > 0 && m.view != viewApprovals {
		out = append(out, m.banner(fmt.Sprintf("%d REQUEST(S) WAIT FOR YOUR ANSWER — press 7 (approvals), then o once · a always · d deny", k))...)
	}
	return out
}

// nodeLine is the node's version, pid, system, uptime and health, with the
// connection's state at the right.
func (m *Model) nodeLine() string {
	st, n := m.styles, m.st.Node
	live := st.Good.Render("● live")
	switch m.conn {
	case connDown:
		live = st.Bad.Render("○ disconnected")
	case connConnecting:
		live = st.Warn.Render("○ reconnecting")
	}
	who := n.OS
	if n.Root {
		who += ", root"
	}
	// While disconnected the node may be gone: its uptime stops where it was seen.
	seen := m.now
	if m.conn != connLive && !m.lastEvent.IsZero() {
		seen = m.lastEvent
	}
	l1 := fmt.Sprintf("%s %s · pid %d · %s · up %s · health %s", st.Title.Render("oz0-node"), n.Version, n.PID, who, orDash(uptime(n, seen)), healthText(st, n.Health))
	return spread(l1, live, m.w)
}

// tierLine is the tier, backend, mode, plugin users and data folder.
func (m *Model) tierLine() string {
	n := m.st.Node
	backend := n.Backend
	if n.Tier == 0 || backend == "" {
		backend = "none"
	}
	users := n.Users
	if users == "" {
		users = "-"
	}
	return cut(fmt.Sprintf("%s %d · backend %s · mode %s · plugin users: %s · data %s",
		m.styles.Label.Render("tier"), n.Tier, backend, orDash(n.Mode), users, orDash(n.DataDir)), m.w)
}

// notCoveredLines is what the tier does not cover, as the node states it: one or
// two wrapped lines, or on a tier with many gaps a line for each.
func (m *Model) notCoveredLines() []string {
	n := m.st.Node
	nc := "nothing stated by the node"
	if len(n.NotCovers) > 0 {
		nc = strings.Join(n.NotCovers, "; ")
	}
	ncl := wrap("not covered: "+nc, m.w, "  ")
	maxNC := 2
	if m.compact() {
		maxNC = 1
	} else if len(n.NotCovers) > 2 {
		// A tier with many gaps (Landlock) lists each on a line of its own.
		ncl = []string{"not covered:"}
		for _, g := range n.NotCovers {
			ncl = append(ncl, cut("  - "+g, m.w))
		}
		maxNC = maxNotCoveredLines
	}
	if len(ncl) > maxNC {
		ncl = ncl[:maxNC]
		ncl[maxNC-1] = cut(ncl[maxNC-1]+" …", m.w)
	}
	out := make([]string, len(ncl))
	for i, l := range ncl {
		out[i] = m.styles.WarnLine.Render(l)
	}
	return out
}

// exemptionLines is the exemptions in force and the node's labels: two lines, or
// one on a short terminal.
func (m *Model) exemptionLines() []string {
	st := m.styles
	inForce, warnings := exemptionsInForce(m.st.Exempt)
	ex := "exemptions in force: none"
	if len(inForce) > 0 {
		ex = "exemptions in force: " + strings.Join(inForce, ", ")
	}
	if warnings > 0 {
		ex += fmt.Sprintf(" · %d flag(s) with warnings (3)", warnings)
	}
	if len(inForce) > 0 || warnings > 0 {
		ex = st.Warn.Render(ex)
	}
	labels := sortedLabels(m.st.Node.Labels)
	if len(labels) == 0 {
		labels = []string{"none"}
	}
	lab := st.Label.Render("labels") + " " + strings.Join(labels, " ")
	if m.compact() {
		// A short terminal keeps its lines for the views: one line for both.
		return []string{cut(ex+" · "+lab, m.w)}
	}
	return []string{cut(ex, m.w), cut(lab, m.w)}
}

// compact is a terminal too short for the full header (80×24 and the like).
func (m *Model) compact() bool { return m.h < 30 }

// maxNotCoveredLines bounds the header's list of what the tier does not cover.
const maxNotCoveredLines = 12

func healthText(st Styles, h string) string {
	switch h {
	case "ok":
		return st.Good.Render(h)
	case "":
		return "-"
	case "failing":
		return st.Bad.Render(h)
	}
	return st.Warn.Render(h)
}

// spread puts left and right on one line of width w, cutting left if needed.
func spread(left, right string, w int) string {
	rw := len([]rune(stripped(right)))
	left = cut(left, max(0, w-rw-1))
	gap := w - len([]rune(stripped(left))) - rw
	if gap < 1 {
		return left
	}
	return left + strings.Repeat(" ", gap) + right
}

// tabs names the views with a count each; the active one is bracketed, so it shows
// without colour too.
func (m *Model) tabs() string {
	st := m.styles
	counts := make([]string, len(m.views))
	if m.st != nil {
		for i, v := range m.views {
			counts[i] = v.Count(m.st)
		}
	}
	render := func(short bool) string {
		var parts []string
		for i, v := range m.views {
			name := v.Title()
			if short && i != m.view && len(name) > 3 {
				name = name[:3] // a narrow terminal still shows every tab and its count
			}
			t := fmt.Sprintf("%d %s%s", i+1, name, counts[i])
			if i == m.view {
				parts = append(parts, st.TabActive.Render("["+t+"]"))
			} else {
				parts = append(parts, st.TabIdle.Render(" "+t+" "))
			}
		}
		return strings.Join(parts, "")
	}
	line := render(false)
	if len([]rune(stripped(line))) > m.w {
		line = render(true)
	}
	return cut(line, m.w)
}

// hint is a line of advice under a view; flag, if any, is an exact command-line
// flag to copy, so it is never cut: the words around it go first.
type hint struct{ lead, flag string }

func (m *Model) hintLine() string {
	h := m.active().Hint()
	full := strings.TrimSpace("hint: " + h.lead + " " + h.flag)
	switch {
	case h.lead == "" && h.flag == "":
		return ""
	case len([]rune(full)) <= m.w || h.flag == "":
		return m.styles.Hint.Render(cut(full, m.w))
	}
	return m.styles.Hint.Render(h.flag)
}

func (m *Model) statusLine() string {
	st := m.styles
	switch {
	case m.confirm != nil:
		return st.Prompt.Render(cut(fmt.Sprintf("Restart %s/%s? y/n", m.confirm.plugin, m.confirm.server), m.w))
	case m.editing:
		return cut(st.Prompt.Render("/")+string(m.input)+"█"+st.Dim.Render("  (enter keeps, esc clears)"), m.w)
	}
	var parts []string
	if f := m.filters[m.view]; f != "" {
		parts = append(parts, "filter: "+f+" (esc clears)")
	}
	if m.note != "" {
		if m.noteErr {
			parts = append(parts, st.Error.Render(m.note))
		} else {
			parts = append(parts, m.note)
		}
	}
	return cut(strings.Join(parts, " · "), m.w)
}
