package tui

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// exemptionsView lists each --plugin-sandbox-exempt in force, what it matches and
// why it might not do what it seems to.
type exemptionsView struct {
	keys   KeyMap
	styles Styles
	st     *api.Status
	w, h   int
	filter string

	list []api.Exemption
	nav  listNav
}

func newExemptionsView(k KeyMap, s Styles) *exemptionsView {
	return &exemptionsView{keys: k, styles: s}
}

func (v *exemptionsView) Title() string { return "Exemptions" }

// Count says how many flags there are, and how many of them carry a warning.
func (v *exemptionsView) Count(st *api.Status) string {
	if _, warn := exemptionsInForce(st.Exempt); warn > 0 {
		return fmt.Sprintf("(%d, %d!)", len(st.Exempt), warn)
	}
	return fmt.Sprintf("(%d)", len(st.Exempt))
}

func (v *exemptionsView) SetSize(w, h int)         { v.w, v.h = w, h; v.refresh() }
func (v *exemptionsView) SetStyles(s Styles)       { v.styles = s }
func (v *exemptionsView) SetStatus(st *api.Status) { v.st = st; v.refresh() }
func (v *exemptionsView) SetFilter(f string)       { v.filter = f; v.refresh() }
func (v *exemptionsView) Back() bool               { return false }
func (v *exemptionsView) BackTo() int              { return noView }
func (v *exemptionsView) Event(_ api.Event, st *api.Status) {
	if st != nil {
		v.SetStatus(st)
	}
}
func (v *exemptionsView) detailHeight() int { return min(6, max(3, v.h/3)) }
func (v *exemptionsView) listHeight() int   { return max(1, v.h-2-v.grantLines()-v.detailHeight()) }

// grantLines is the height of the hook-visibility line under the title: one when
// any --plugin-hooks-see is in force.
func (v *exemptionsView) grantLines() int {
	if v.st == nil || len(v.st.HookGrants) == 0 {
		return 0
	}
	return 1
}

// grantsLine says whose hooks see whose tool calls, beyond their own: the other
// grant the operator makes on the command line, shown beside the exemptions.
func grantsLine(st Styles, gs []api.HookGrant, w int) string {
	parts := make([]string, 0, len(gs))
	missing := false
	for _, g := range gs {
		p := g.Watcher + "→" + g.Other
		if g.Matches != "both" {
			p += " (" + orDash(g.Matches) + ")"
			missing = true
		}
		parts = append(parts, p)
	}
	list := strings.Join(parts, ", ")
	line := "  hooks see others' calls (--plugin-hooks-see): " + list
	if len([]rune(line)) > w {
		line = cut("  hooks see: "+list, w)
	}
	if missing {
		return st.Warn.Render(line)
	}
	return line
}

func (v *exemptionsView) refresh() {
	v.list = v.list[:0]
	if v.st == nil {
		return
	}
	f := strings.ToLower(v.filter)
	for _, e := range v.st.Exempt {
		if f == "" || strings.Contains(strings.ToLower(e.Flag+" "+e.Matches+" "+e.Detail), f) {
			v.list = append(v.list, e)
		}
	}
	v.nav.clamp(len(v.list), v.listHeight())
}

func (v *exemptionsView) Key(km tea.KeyPressMsg, _ root) tea.Cmd {
	v.nav.move(v.keys, km, len(v.list), v.listHeight())
	return nil
}

// Hint is the copy-ready flag that would make a mismatched exemption match.
func (v exemptionsView) Hint() hint {
	if v.st == nil || v.nav.cursor >= len(v.list) {
		return hint{}
	}
	if h := exemptionHint(v.list[v.nav.cursor], v.st.Plugins); h != "" {
		return hint{lead: "to exempt the installed commit instead:", flag: h}
	}
	return hint{}
}

func (v exemptionsView) columns() []column {
	return layoutColumns([]column{
		{title: "FLAG", width: min(34, max(20, v.w/4))},
		{title: "EXEMPTS", width: min(34, max(16, v.w/4))},
		{title: "WARNING", flex: true},
	}, v.w, 10)
}

func (v exemptionsView) View() string {
	st := v.styles
	if v.st == nil {
		return st.Dim.Render("  waiting for the node's status…")
	}
	inForce, warnings := exemptionsInForce(v.st.Exempt)
	title := fmt.Sprintf("  %d exemption flags · %d in force · %d with warnings · only the operator can exempt (run --plugin-sandbox-exempt)",
		len(v.st.Exempt), len(inForce), warnings)
	lines := []string{st.Dim.Render(cut(title, v.w))}
	if len(v.st.HookGrants) > 0 {
		lines = append(lines, grantsLine(st, v.st.HookGrants, v.w))
	}
	if len(v.st.Exempt) == 0 {
		lines = append(lines, "", "  no --plugin-sandbox-exempt given: every plugin runs as the policy decides")
		return strings.Join(lines, "\n")
	}
	cols := v.columns()
	lines = append(lines, headRow(cols, st.ColHead))
	end := min(len(v.list), v.nav.offset+v.listHeight()-1)
	for i := v.nav.offset; i < end; i++ {
		e := v.list[i]
		matches, warning := exemptionWords(e, v.st.Plugins)
		wc := plain("")
		if warning != "" {
			wc = styled("WARNING: "+warning, st.Warn)
		}
		mc := styled(matches, st.Warn)
		if warning != "" {
			mc = plain(matches)
		}
		lines = append(lines, row(cols, []cell{plain(e.Flag), mc, wc}, i == v.nav.cursor, st.Selected))
	}
	// The selected item's detail follows the list, a blank line between.
	lines = append(lines[:max(0, min(len(lines), v.h-v.detailHeight()-1))], "")
	if v.nav.cursor < len(v.list) {
		e := v.list[v.nav.cursor]
		matches, warning := exemptionWords(e, v.st.Plugins)
		d := []string{st.Section.Render(cut("--plugin-sandbox-exempt "+e.Flag, v.w))}
		d = append(d, wrap("exempts: "+matches+" (plugin "+orDash(e.Plugin)+", commit "+orDash(e.Commit)+")", v.w, "  ")...)
		if warning != "" {
			d = append(d, st.Warn.Render(strings.Join(wrap("warning: "+warning, v.w, "  "), "\n")))
		}
		if e.Detail != "" {
			d = append(d, wrap(e.Detail, v.w, "  ")...)
		}
		lines = append(lines, fitHeight(d, v.detailHeight())...)
	}
	return strings.Join(lines, "\n")
}
