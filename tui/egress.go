package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// egressView lists the proxy's recent decisions across plugins, newest first,
// denials marked DENY, each with the rule that decided.
type egressView struct {
	keys       KeyMap
	styles     Styles
	st         *api.Status
	w, h       int
	filter     string
	denialOnly bool

	list []api.EgressDecision
	nav  listNav
}

func newEgressView(k KeyMap, s Styles) *egressView {
	return &egressView{keys: k, styles: s}
}

func (v *egressView) Title() string { return "Egress" }

// Count is the denials among the recent decisions.
func (v *egressView) Count(st *api.Status) string {
	denied := 0
	for _, d := range st.Egress.Recent {
		if d.Decision == "deny" {
			denied++
		}
	}
	return fmt.Sprintf("(%d denied)", denied)
}

func (v *egressView) SetSize(w, h int)         { v.w, v.h = w, h; v.refresh() }
func (v *egressView) SetStyles(s Styles)       { v.styles = s }
func (v *egressView) SetStatus(st *api.Status) { v.st = st; v.refresh() }
func (v *egressView) SetFilter(f string)       { v.filter = f; v.refresh() }
func (v *egressView) Back() bool               { return false }
func (v *egressView) BackTo() int              { return noView }
func (v *egressView) Event(_ api.Event, st *api.Status) {
	if st != nil {
		v.SetStatus(st)
	}
}
func (v egressView) Hint() hint         { return hint{} }
func (v *egressView) detailHeight() int { return 3 }
func (v *egressView) listHeight() int   { return max(1, v.h-2-v.detailHeight()) }

func (v *egressView) refresh() {
	v.list = v.list[:0]
	if v.st == nil {
		return
	}
	f := strings.ToLower(v.filter)
	for _, d := range v.st.Egress.Recent {
		if v.denialOnly && d.Decision != "deny" {
			continue
		}
		if f != "" && !strings.Contains(strings.ToLower(fmt.Sprintf("%s %s %s %s:%d %s", d.Decision, d.Plugin, d.Server, d.Host, d.Port, d.Rule)), f) {
			continue
		}
		v.list = append(v.list, d)
	}
	v.nav.clamp(len(v.list), v.listHeight())
}

func (v *egressView) Key(km tea.KeyPressMsg, _ root) tea.Cmd {
	if key.Matches(km, v.keys.Denials) {
		v.denialOnly = !v.denialOnly
		v.refresh()
		return nil
	}
	v.nav.move(v.keys, km, len(v.list), v.listHeight())
	return nil
}

func (v egressView) columns() []column {
	return layoutColumns([]column{
		{title: "TIME", width: 8},
		{title: "DECISION", width: 8},
		{title: "PLUGIN", width: min(22, max(12, v.w/5))},
		{title: "HOST:PORT", width: min(32, max(18, v.w/4))},
		{title: "RULE", flex: true},
	}, v.w, 10)
}

func (v egressView) View() string {
	st := v.styles
	if v.st == nil {
		return st.Dim.Render("  waiting for the node's status…")
	}
	e := v.st.Egress
	tenant := "tenant list " + orDash(e.TenantList)
	if len(e.Patterns) > 0 {
		tenant += fmt.Sprintf(": %d entries", len(e.Patterns))
	}
	if !e.TenantOK {
		tenant = st.Bad.Render("tenant list " + orDash(e.TenantList) + " UNREADABLE: the proxy denies everything")
	}
	denied := 0
	for _, d := range e.Recent {
		if d.Decision == "deny" {
			denied++
		}
	}
	only := ""
	if v.denialOnly {
		only = " · denials only"
	}
	lines := []string{cut(fmt.Sprintf("  %d recent decisions, %d denied%s (d toggles) · ", len(e.Recent), denied, only)+tenant, v.w)}
	cols := v.columns()
	lines = append(lines, headRow(cols, st.ColHead))
	if len(v.list) == 0 {
		lines = append(lines, st.Dim.Render("  no egress decisions recorded yet"))
	}
	end := min(len(v.list), v.nav.offset+v.listHeight()-1)
	for i := v.nav.offset; i < end; i++ {
		d := v.list[i]
		dec := styled("allow", st.Good)
		if d.Decision == "deny" {
			dec = styled("DENY", st.Bad)
		} else if d.Decision != "allow" {
			dec = plain(d.Decision)
		}
		plugin := d.Plugin
		if d.Server != "" {
			plugin += "/" + d.Server
		}
		lines = append(lines, row(cols, []cell{
			plain(clock(d.Time)), dec, plain(plugin), plain(fmt.Sprintf("%s:%d", d.Host, d.Port)), plain(d.Rule),
		}, i == v.nav.cursor, st.Selected))
	}
	// The selected item's detail follows the list, a blank line between.
	lines = append(lines[:max(0, min(len(lines), v.h-v.detailHeight()-1))], "")
	if v.nav.cursor < len(v.list) {
		d := v.list[v.nav.cursor]
		head := fmt.Sprintf("%s %s:%d for %s", strings.ToUpper(d.Decision), d.Host, d.Port, d.Plugin)
		if d.Addr != "" {
			head += " (address " + d.Addr + ")"
		}
		if d.Bytes > 0 {
			head += fmt.Sprintf(", %d bytes", d.Bytes)
		}
		det := []string{st.Section.Render(cut(head+" · "+d.Time, v.w))}
		det = append(det, wrap("rule: "+d.Rule, v.w, "  ")...)
		lines = append(lines, fitHeight(det, v.detailHeight())...)
	}
	return strings.Join(lines, "\n")
}
