package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// severityFilters are the steps 's' cycles through: all, then at least each level.
var severityFilters = []api.Severity{"", api.SevWarning, api.SevError, api.SevCritical}

// findingsView lists findings newest first, the selected one's message and fix below.
type findingsView struct {
	keys   KeyMap
	styles Styles
	st     *api.Status
	w, h   int
	filter string
	minSev int // index into severityFilters

	list []api.Finding
	nav  listNav
}

func newFindingsView(k KeyMap, s Styles) *findingsView {
	return &findingsView{keys: k, styles: s}
}

func (v *findingsView) Title() string               { return "Findings" }
func (v *findingsView) Count(st *api.Status) string { return fmt.Sprintf("(%d)", len(st.Findings)) }
func (v *findingsView) SetSize(w, h int)            { v.w, v.h = w, h; v.refresh() }
func (v *findingsView) SetStyles(s Styles)          { v.styles = s }
func (v *findingsView) SetStatus(st *api.Status)    { v.st = st; v.refresh() }
func (v *findingsView) SetFilter(f string)          { v.filter = f; v.refresh() }
func (v *findingsView) Back() bool                  { return false }
func (v *findingsView) BackTo() int                 { return noView }
func (v *findingsView) severity() api.Severity      { return severityFilters[v.minSev] }
func (v *findingsView) detailHeight() int           { return min(7, max(3, v.h/3)) }
func (v *findingsView) listHeight() int             { return max(1, v.h-2-v.detailHeight()) }
func (v findingsView) Hint() hint                   { return hint{} }
func (v *findingsView) Event(_ api.Event, st *api.Status) {
	if st != nil {
		v.SetStatus(st)
	}
}
func (v *findingsView) selected() (api.Finding, bool) {
	if v.nav.cursor < len(v.list) {
		return v.list[v.nav.cursor], true
	}
	return api.Finding{}, false
}

func (v *findingsView) refresh() {
	v.list = v.list[:0]
	if v.st == nil {
		return
	}
	f := strings.ToLower(v.filter)
	min := v.severity().Rank()
	for _, x := range findingsNewestFirst(v.st.Findings) {
		if v.severity() != "" && x.Severity.Rank() < min {
			continue
		}
		if f != "" && !strings.Contains(strings.ToLower(string(x.Severity)+" "+x.Code+" "+x.Subject+" "+x.Message), f) {
			continue
		}
		v.list = append(v.list, x)
	}
	v.nav.clamp(len(v.list), v.listHeight())
}

func (v *findingsView) Key(km tea.KeyPressMsg, _ root) tea.Cmd {
	if key.Matches(km, v.keys.Severity) {
		v.minSev = (v.minSev + 1) % len(severityFilters)
		v.refresh()
		return nil
	}
	v.nav.move(v.keys, km, len(v.list), v.listHeight())
	return nil
}

func (v findingsView) columns() []column {
	return layoutColumns([]column{
		{title: "SEVERITY", width: 8},
		{title: "CODE", width: 25},
		{title: "SUBJECT", width: min(24, max(14, v.w/5))},
		{title: "MESSAGE", flex: true},
	}, v.w, 10)
}

func (v findingsView) View() string {
	st := v.styles
	if v.st == nil {
		return st.Dim.Render("  waiting for the node's status…")
	}
	sev := "all severities"
	if s := v.severity(); s != "" {
		sev = "severity ≥ " + string(s)
	}
	title := fmt.Sprintf("  %d of %d findings, newest first · %s (s changes)", len(v.list), len(v.st.Findings), sev)
	lines := []string{st.Dim.Render(cut(title, v.w))}
	cols := v.columns()
	lines = append(lines, headRow(cols, st.ColHead))
	if len(v.list) == 0 {
		lines = append(lines, st.Dim.Render("  no findings"))
	}
	end := min(len(v.list), v.nav.offset+v.listHeight()-1)
	for i := v.nav.offset; i < end; i++ {
		f := v.list[i]
		lines = append(lines, row(cols, []cell{
			styled(strings.ToUpper(string(f.Severity)), st.sevStyle(string(f.Severity))),
			plain(f.Code), plain(f.Subject), plain(f.Message),
		}, i == v.nav.cursor, st.Selected))
	}
	// The selected item's detail follows the list, a blank line between.
	lines = append(lines[:max(0, min(len(lines), v.h-v.detailHeight()-1))], "")
	if f, ok := v.selected(); ok {
		var d []string
		d = append(d, st.Section.Render(cut(fmt.Sprintf("%s · %s · %s", f.Code, f.Subject, orDash(f.Time)), v.w)))
		d = append(d, wrap(f.Message, v.w, "  ")...)
		if f.Fix != "" {
			d = append(d, st.Hint.Render(strings.Join(wrap("fix: "+f.Fix, v.w, "  "), "\n")))
		}
		lines = append(lines, fitHeight(d, v.detailHeight())...)
	}
	return strings.Join(lines, "\n")
}
