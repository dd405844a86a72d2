package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

// approvalsView lists the requests waiting for the operator (--approval-wait):
// which plugin and server, what for, the manifest's reason, how many times it
// asked and how long until it is refused. One key answers the selected one
// (the root model sends it: o once, a always, d deny).
type approvalsView struct {
	keys   KeyMap
	styles Styles
	st     *api.Status
	w, h   int
	filter string
	now    func() time.Time

	list []api.Approval
	nav  listNav
}

func newApprovalsView(k KeyMap, s Styles, now func() time.Time) *approvalsView {
	return &approvalsView{keys: k, styles: s, now: now}
}

func (v *approvalsView) Title() string               { return "Approvals" }
func (v *approvalsView) Count(st *api.Status) string { return fmt.Sprintf("(%d)", len(st.Approvals)) }
func (v *approvalsView) SetSize(w, h int)            { v.w, v.h = w, h; v.refresh() }
func (v *approvalsView) SetStyles(s Styles)          { v.styles = s }
func (v *approvalsView) SetStatus(st *api.Status)    { v.st = st; v.refresh() }
func (v *approvalsView) SetFilter(f string)          { v.filter = f; v.refresh() }
func (v *approvalsView) Back() bool                  { return false }
func (v *approvalsView) BackTo() int                 { return noView }
func (v approvalsView) Hint() hint                   { return hint{} }
func (v *approvalsView) Event(_ api.Event, st *api.Status) {
	if st != nil {
		v.SetStatus(st)
	}
}
func (v *approvalsView) detailHeight() int { return 6 }
func (v *approvalsView) listHeight() int   { return max(1, v.h-2-v.detailHeight()) }

func (v *approvalsView) refresh() {
	v.list = v.list[:0]
	if v.st == nil {
		return
	}
	f := strings.ToLower(v.filter)
	for _, a := range v.st.Approvals {
		if f != "" && !strings.Contains(strings.ToLower(strings.Join([]string{a.Kind, a.Plugin, a.Server, approvalWhat(a), a.Reason, a.Refusal}, " ")), f) {
			continue
		}
		v.list = append(v.list, a)
	}
	v.nav.clamp(len(v.list), v.listHeight())
}

// selected is the approval under the cursor.
func (v *approvalsView) selected() (api.Approval, bool) {
	if v.nav.cursor < len(v.list) {
		return v.list[v.nav.cursor], true
	}
	return api.Approval{}, false
}

// Key answers the approval selected with one key (o, a, d); the others move.
func (v *approvalsView) Key(km tea.KeyPressMsg, r root) tea.Cmd {
	k := v.keys
	if key.Matches(km, k.Once) || key.Matches(km, k.Always) || key.Matches(km, k.Refuse) {
		a, ok := v.selected()
		if !ok {
			r.say("nothing waits for an answer")
			return nil
		}
		answer := api.AnswerDeny
		switch {
		case key.Matches(km, k.Once):
			answer = api.AnswerOnce
		case key.Matches(km, k.Always):
			answer = api.AnswerAlways
		}
		return r.answer(a.ID, answer)
	}
	v.nav.move(v.keys, km, len(v.list), v.listHeight())
	return nil
}

func approvalWhat(a api.Approval) string {
	if a.Kind == "egress" {
		return fmt.Sprintf("%s:%d", a.Host, a.Port)
	}
	return a.Tool
}

func (v approvalsView) columns() []column {
	return layoutColumns([]column{
		{title: "ID", width: 4},
		{title: "KIND", width: 6},
		{title: "PLUGIN/SERVER", width: min(28, max(14, v.w/5))},
		{title: "ASKED FOR", flex: true},
		{title: "ASKED", width: 6},
		{title: "REFUSED IN", width: 10},
	}, v.w, 12)
}

func (v approvalsView) View() string {
	st := v.styles
	if v.st == nil {
		return st.Dim.Render("  waiting for the node's status…")
	}
	wait := v.st.ApprovalWait
	if wait == "" {
		return strings.Join([]string{
			st.Dim.Render("  approvals are off: a request the tenant's lists refuse is refused at once."),
			st.Dim.Render("  Run the node with --approval-wait 30s to answer them here."),
		}, "\n")
	}
	lines := []string{cut(fmt.Sprintf("  %d request(s) wait for your answer; each waits %s, then it is refused · o allow once · a allow always · d deny", len(v.st.Approvals), wait), v.w)}
	cols := v.columns()
	lines = append(lines, headRow(cols, st.ColHead))
	if len(v.list) == 0 {
		lines = append(lines, st.Dim.Render("  nothing waits"))
	}
	now := v.now()
	end := min(len(v.list), v.nav.offset+v.listHeight()-1)
	for i := v.nav.offset; i < end; i++ {
		a := v.list[i]
		who := a.Plugin
		if a.Server != "" {
			who += "/" + a.Server
		}
		left := "-"
		if t, err := time.Parse(time.RFC3339, a.Expires); err == nil {
			left = humanDuration(max(0, t.Sub(now)))
		}
		lines = append(lines, row(cols, []cell{
			plain(a.ID), styled(a.Kind, st.Warn), plain(who), plain(approvalWhat(a)), plain(fmt.Sprint(a.Asked)), plain(left),
		}, i == v.nav.cursor, st.Selected))
	}
	lines = append(lines[:max(0, min(len(lines), v.h-v.detailHeight()-1))], "")
	if a, ok := v.selected(); ok {
		who := "plugin " + a.Plugin
		if a.Server != "" {
			who += ", server " + a.Server
		}
		det := []string{st.Section.Render(cut(fmt.Sprintf("Approval %s: %s asks for %s (%s), asked %d time(s), %d waiting", a.ID, who, approvalWhat(a), a.Kind, a.Asked, a.Waiting), v.w))}
		reason := a.Reason
		if reason == "" {
			reason = "(none given)"
		}
		if a.Kind == "egress" {
			det = append(det, wrap("manifest's reason: "+reason, v.w, "  ")...)
		}
		det = append(det, wrap("refused unless you allow it: "+a.Refusal, v.w, "  ")...)
		keys := "o allow once (this request) · a allow always (a line in the tenant's file, with who and when) · d deny"
		if !a.Always {
			keys = "o allow once (this request) · d deny — always is not possible: a deny line refuses it"
		}
		det = append(det, st.Prompt.Render(cut(keys, v.w)))
		lines = append(lines, fitHeight(det, v.detailHeight())...)
	}
	return strings.Join(lines, "\n")
}
