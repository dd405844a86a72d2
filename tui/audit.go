package tui

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// maxAuditLines bounds the audit lines the view keeps.
const maxAuditLines = 1000

// auditView shows the node's audit stream as it is written, newest first: tool
// calls, hook runs, egress decisions and approvals, each with what decided.
type auditView struct {
	keys   KeyMap
	styles Styles
	w, h   int
	filter string

	all  []api.AuditRecord // newest first
	list []api.AuditRecord
	nav  listNav
}

func newAuditView(k KeyMap, s Styles) *auditView { return &auditView{keys: k, styles: s} }

func (v *auditView) Title() string            { return "Audit" }
func (v *auditView) Count(*api.Status) string { return "" }
func (v *auditView) SetSize(w, h int)         { v.w, v.h = w, h; v.refresh() }
func (v *auditView) SetStyles(s Styles)       { v.styles = s }
func (v *auditView) SetFilter(f string)       { v.filter = f; v.refresh() }
func (v *auditView) Back() bool               { return false }
func (v *auditView) BackTo() int              { return noView }
func (v auditView) Hint() hint                { return hint{} }

// Event keeps the audit line an event carries; the status adds nothing here.
func (v *auditView) Event(ev api.Event, _ *api.Status) {
	if ev.Type == "audit" && ev.Audit != nil {
		v.Add(*ev.Audit)
	}
}
func (v *auditView) detailHeight() int { return 4 }
func (v *auditView) listHeight() int   { return max(1, v.h-2-v.detailHeight()) }

// Add takes lines oldest first (a backlog, or one written now); a line already
// kept (by its number) is not kept twice.
func (v *auditView) Add(lines ...api.AuditRecord) {
	for _, r := range lines {
		if len(v.all) > 0 && r.Seq != 0 && r.Seq <= v.all[0].Seq && v.has(r.Seq) {
			continue
		}
		v.all = append([]api.AuditRecord{r}, v.all...)
	}
	if len(v.all) > maxAuditLines {
		v.all = v.all[:maxAuditLines]
	}
	v.refresh()
}

func (v *auditView) has(seq uint64) bool {
	for _, r := range v.all {
		if r.Seq == seq {
			return true
		}
	}
	return false
}

func (v *auditView) refresh() {
	v.list = v.list[:0]
	f := strings.ToLower(v.filter)
	for _, r := range v.all {
		if f != "" && !strings.Contains(strings.ToLower(strings.Join([]string{r.Kind, r.Plugin, r.Server, auditWhat(r), r.Decision, r.Rule}, " ")), f) {
			continue
		}
		v.list = append(v.list, r)
	}
	v.nav.clamp(len(v.list), v.listHeight())
}

func (v *auditView) Key(km tea.KeyPressMsg, _ root) tea.Cmd {
	v.nav.move(v.keys, km, len(v.list), v.listHeight())
	return nil
}

// auditWhat is what a line is about: a tool, a hook's event, a host.
func auditWhat(r api.AuditRecord) string {
	switch r.Kind {
	case "call":
		return r.Tool
	case "hook":
		if r.Tool != "" {
			return r.Event + " " + r.Tool
		}
		return r.Event
	case "egress":
		return fmt.Sprintf("%s:%d", r.Host, r.Port)
	case "approval":
		if r.Host != "" {
			return fmt.Sprintf("#%s %s:%d", r.Approval, r.Host, r.Port)
		}
		return "#" + r.Approval + " " + r.Tool
	}
	return ""
}

func (v auditView) columns() []column {
	return layoutColumns([]column{
		{title: "TIME", width: 8},
		{title: "SEQ", width: 7},
		{title: "KIND", width: 8},
		{title: "PLUGIN", width: min(20, max(10, v.w/6))},
		{title: "WHAT", width: min(34, max(16, v.w/4))},
		{title: "DECISION", width: 9},
		{title: "RULE OR REASON", flex: true},
	}, v.w, 10)
}

func (v auditView) View() string {
	st := v.styles
	lines := []string{cut(fmt.Sprintf("  the audit stream as it is written: %d line(s) kept, newest first (oz0-node audit reads it whole)", len(v.all)), v.w)}
	cols := v.columns()
	lines = append(lines, headRow(cols, st.ColHead))
	if len(v.list) == 0 {
		lines = append(lines, st.Dim.Render("  no audit lines yet"))
	}
	end := min(len(v.list), v.nav.offset+v.listHeight()-1)
	for i := v.nav.offset; i < end; i++ {
		r := v.list[i]
		dec := plain(r.Decision)
		switch r.Decision {
		case "deny", "block", "timeout":
			dec = styled(r.Decision, st.Bad)
		case "allow", "once", "always":
			dec = styled(r.Decision, st.Good)
		}
		lines = append(lines, row(cols, []cell{
			plain(clock(r.Time)), plain(fmt.Sprint(r.Seq)), plain(r.Kind), plain(r.Plugin), plain(auditWhat(r)), dec, plain(r.Rule),
		}, i == v.nav.cursor, st.Selected))
	}
	lines = append(lines[:max(0, min(len(lines), v.h-v.detailHeight()-1))], "")
	if v.nav.cursor < len(v.list) {
		r := v.list[v.nav.cursor]
		head := fmt.Sprintf("#%d %s %s %s", r.Seq, r.Kind, auditWhat(r), r.Decision)
		var facts []string
		if r.Door != "" {
			facts = append(facts, "door "+r.Door+" ("+r.Path+" path)")
		}
		if r.Outcome != "" {
			facts = append(facts, "outcome "+r.Outcome)
		}
		if r.Seconds > 0 {
			facts = append(facts, fmt.Sprintf("%.1f ms", r.Seconds*1000))
		}
		if r.ResultBytes > 0 {
			facts = append(facts, fmt.Sprintf("%d bytes", r.ResultBytes))
		}
		if r.ArgsSHA256 != "" {
			facts = append(facts, "args sha256 "+r.ArgsSHA256[:min(16, len(r.ArgsSHA256))]+"…")
		}
		if r.By != "" {
			facts = append(facts, "by "+r.By)
		}
		det := []string{st.Section.Render(cut(head+" · "+r.Time, v.w)), cut("  "+strings.Join(facts, " · "), v.w)}
		det = append(det, wrap("rule: "+orDash(r.Rule), v.w, "  ")...)
		lines = append(lines, fitHeight(det, v.detailHeight())...)
	}
	return strings.Join(lines, "\n")
}
