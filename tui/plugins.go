package tui

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/node/api"
)

const (
	rowPlugin = iota
	rowServer
	rowHook
)

// pRow is one line of the plugins table: a plugin, one of its servers or hooks.
type pRow struct {
	kind   int
	pi, xi int // plugin index; server or hook index
}

// pluginsView is the table of plugins → servers and hooks, with a detail pane.
type pluginsView struct {
	keys   KeyMap
	styles Styles
	st     *api.Status
	w, h   int
	filter string

	rows   []pRow
	nav    listNav
	selKey string // the selected row's identity, kept across live updates

	detail bool
	vp     viewport.Model
}

func newPluginsView(k KeyMap, s Styles) *pluginsView {
	return &pluginsView{keys: k, styles: s, vp: viewport.New()}
}

func (v *pluginsView) SetSize(w, h int) {
	v.w, v.h = w, h
	v.vp.SetWidth(w)
	v.vp.SetHeight(max(1, h-1))
	v.refresh()
}

func (v *pluginsView) Title() string { return "Plugins" }

func (v *pluginsView) Count(st *api.Status) string { return fmt.Sprintf("(%d)", len(st.Plugins)) }

// SetStyles re-renders an open detail pane: it is rendered text.
func (v *pluginsView) SetStyles(s Styles) {
	v.styles = s
	v.refresh()
}

func (v *pluginsView) Event(_ api.Event, st *api.Status) {
	if st != nil {
		v.SetStatus(st)
	}
}

func (v *pluginsView) SetStatus(st *api.Status) {
	v.st = st
	v.refresh()
}

func (v *pluginsView) SetFilter(f string) {
	v.filter = f
	v.refresh()
}

// refresh rebuilds the rows from the status, keeps the selection on the same plugin
// or server, and re-renders an open detail pane so live changes show in it too.
func (v *pluginsView) refresh() {
	v.rows = v.rows[:0]
	if v.st != nil {
		f := strings.ToLower(v.filter)
		for pi, p := range v.st.Plugins {
			pluginHit := f == "" || strings.Contains(strings.ToLower(p.Name+" "+p.ID), f)
			var sub []pRow
			for si, s := range p.Servers {
				if pluginHit || strings.Contains(strings.ToLower(s.Name+" "+s.State), f) {
					sub = append(sub, pRow{rowServer, pi, si})
				}
			}
			for hi, h := range p.Hooks {
				if pluginHit || strings.Contains(strings.ToLower("hook "+h.Event+" "+h.Matcher), f) {
					sub = append(sub, pRow{rowHook, pi, hi})
				}
			}
			if pluginHit || len(sub) > 0 {
				v.rows = append(v.rows, pRow{rowPlugin, pi, -1})
				v.rows = append(v.rows, sub...)
			}
		}
	}
	if v.selKey != "" {
		for i, r := range v.rows {
			if v.rowKey(r) == v.selKey {
				v.nav.cursor = i
				break
			}
		}
	}
	v.nav.clamp(len(v.rows), v.listHeight())
	v.remember()
	if v.detail {
		off := v.vp.YOffset()
		v.vp.SetContent(v.detailText())
		v.vp.SetYOffset(off)
	}
}

func (v *pluginsView) listHeight() int { return max(1, v.h-1) }

func (v *pluginsView) remember() {
	if r, ok := v.selected(); ok {
		v.selKey = v.rowKey(r)
	}
}

func (v *pluginsView) rowKey(r pRow) string {
	p := v.st.Plugins[r.pi]
	switch r.kind {
	case rowServer:
		return p.Name + "/" + p.Servers[r.xi].Name
	case rowHook:
		return fmt.Sprintf("%s#hook%d", p.Name, r.xi)
	}
	return p.Name
}

func (v *pluginsView) selected() (pRow, bool) {
	if v.nav.cursor < 0 || v.nav.cursor >= len(v.rows) {
		return pRow{}, false
	}
	return v.rows[v.nav.cursor], true
}

// target is the server the actions (restart, log) apply to: the selected server,
// or the only server of the selected plugin.
func (v *pluginsView) target() (api.Plugin, api.Server, bool) {
	r, ok := v.selected()
	if !ok {
		return api.Plugin{}, api.Server{}, false
	}
	p := v.st.Plugins[r.pi]
	switch {
	case r.kind == rowServer:
		return p, p.Servers[r.xi], true
	case r.kind == rowPlugin && len(p.Servers) == 1:
		return p, p.Servers[0], true
	}
	return p, api.Server{}, false
}

// Back closes the detail pane; it reports whether there was one.
func (v *pluginsView) Back() bool {
	if v.detail {
		v.detail = false
		return true
	}
	return false
}

func (v *pluginsView) BackTo() int { return noView }

func (v *pluginsView) Key(km tea.KeyPressMsg, r root) tea.Cmd {
	if key.Matches(km, v.keys.Restart) || key.Matches(km, v.keys.Logs) {
		// The question is put now, not by a command, so a 'y' typed right after
		// 'r' meets it.
		p, s, ok := v.target()
		switch {
		case !ok:
			r.say("select a server first (a plugin with several servers lists them below it)")
		case key.Matches(km, v.keys.Restart):
			r.askRestart(p.Name, s.Name)
		default:
			return r.follow(p.Name, s.Name)
		}
		return nil
	}
	if v.st == nil {
		return nil
	}
	if v.detail {
		var cmd tea.Cmd
		switch {
		case key.Matches(km, v.keys.Top):
			v.vp.GotoTop()
		case key.Matches(km, v.keys.Bottom):
			v.vp.GotoBottom()
		default:
			v.vp, cmd = v.vp.Update(km)
		}
		return cmd
	}
	if key.Matches(km, v.keys.Enter) {
		if _, ok := v.selected(); ok {
			v.detail = true
			v.vp.SetContent(v.detailText())
			v.vp.GotoTop()
		}
		return nil
	}
	if v.nav.move(v.keys, km, len(v.rows), v.listHeight()) {
		v.remember()
	}
	return nil
}

// wide terminals get the commit's 12 digits and a column saying why each server
// runs as its user.
func (v pluginsView) wide() bool { return v.w >= 110 }

func (v pluginsView) columns() []column {
	cols := []column{
		{title: "PLUGIN / SERVER", flex: true},
		{title: "STATE", width: 11},
		{title: "SANDBOX", width: 8},
		{title: "USER", width: 14},
		{title: "RST", width: 3},
		{title: "ALLOW/DENY", width: 10},
		{title: "COMMIT", width: 7},
	}
	if v.wide() {
		cols[0] = column{title: "PLUGIN / SERVER", width: 20}
		cols[6].width = 12
		cols = append(cols, column{title: "USER: WHY", flex: true})
	}
	return layoutColumns(cols, v.w, 12)
}

func (v pluginsView) View() string {
	if v.st == nil {
		return v.styles.Dim.Render("  waiting for the node's status…")
	}
	if v.detail {
		title := v.styles.Section.Render("Details") + v.styles.Dim.Render("  (esc closes, ↑/↓ scroll, r restart, l follow log)")
		return title + "\n" + v.vp.View()
	}
	if len(v.st.Plugins) == 0 {
		return v.styles.Dim.Render("  no plugins installed (oz0-node plugin install REPO@COMMIT)")
	}
	cols := v.columns()
	lines := []string{headRow(cols, v.styles.ColHead)}
	if len(v.rows) == 0 {
		lines = append(lines, v.styles.Dim.Render("  nothing matches the filter"))
	}
	end := min(len(v.rows), v.nav.offset+v.listHeight())
	for i := v.nav.offset; i < end; i++ {
		lines = append(lines, row(cols, v.cells(v.rows[i]), i == v.nav.cursor, v.styles.Selected))
	}
	return strings.Join(lines, "\n")
}

func (v pluginsView) cells(r pRow) []cell {
	st := v.styles
	p := v.st.Plugins[r.pi]
	switch r.kind {
	case rowServer:
		s := p.Servers[r.xi]
		user := shortUser(s.User)
		if s.State == api.StateRefused {
			user = "-"
		}
		sandbox, why := s.Sandbox, userWhyShort(v.st.Node, p, s)
		if s.Remote != "" {
			// A remote server runs nowhere here: where it is says more than a user.
			sandbox, user = "remote", orDash(s.Host)
			why = "remote " + s.Remote + ", via the egress proxy"
		}
		return []cell{
			plain("  " + s.Name),
			styled(stateLabel(s.State), st.stateStyle(s.State)),
			plain(sandbox),
			plain(user),
			plain(fmt.Sprint(s.Restarts)),
			plain(""),
			plain(""),
			styled(why, st.Dim),
		}
	case rowHook:
		h := p.Hooks[r.xi]
		name := "  hook " + h.Event
		if h.Matcher != "" {
			name += " (" + h.Matcher + ")"
		}
		return []cell{plain(name), styled(h.Action, st.stateStyle(h.Action)), plain(h.Sandbox)}
	}
	name := p.Name
	if p.Exempt {
		name += " [exempt]"
	}
	if p.Private {
		name += " [private]"
	}
	state := pluginState(p)
	egress := styled(fmt.Sprintf("%d/%d", p.Allowed, p.Denied), st.Dim)
	if p.Denied > 0 {
		egress = styled(fmt.Sprintf("%d/%d", p.Allowed, p.Denied), st.Bad)
	}
	return []cell{
		styled(name, st.Title),
		styled(stateLabel(state), st.stateStyle(state)),
		plain(p.Backend),
		plain(shortUser(p.User)),
		plain(fmt.Sprint(pluginRestarts(p))),
		egress,
		plain(shortCommit(p.Commit, v.columns()[6].width)),
	}
}

// Hint is the footer line for the selected row: the copy-ready flag for a refused
// server, what to press for a failing one.
func (v pluginsView) Hint() hint {
	if v.st == nil {
		return hint{}
	}
	p, s, ok := v.target()
	if !ok {
		return hint{}
	}
	if fix := configFix(v.st.Findings, p.Name+"/"+s.Name); fix != "" {
		return hint{lead: "to set it:", flag: fix}
	}
	if h, ok := exemptHint(p, s); ok {
		return hint{lead: "to exempt it (runs unsandboxed as the node's user):", flag: h}
	} else if h != "" {
		return hint{lead: h}
	}
	switch s.State {
	case api.StateCrashed, api.StateBackingOff:
		return hint{lead: "l follows its log · r restarts it · enter shows its last stderr"}
	}
	return hint{}
}

// detailText is the pane Enter opens: everything the node knows about the plugin,
// with the selected server first.
func (v pluginsView) detailText() string {
	r, ok := v.selected()
	if !ok || v.st == nil {
		return ""
	}
	st := v.styles
	p := v.st.Plugins[r.pi]
	w := max(20, v.w)
	var b []string
	add := func(s ...string) { b = append(b, s...) }
	kv := func(k, val string) { add(wrapKV(st, k, val, w)...) }

	add(st.Title.Render(p.Name) + st.Dim.Render("  "+strings.TrimSpace(p.ID+" "+p.Version)))
	installed := "repository " + orDash(p.Source) + " at commit " + orDash(p.Commit)
	if p.InstalledBy != "" || p.InstalledAt != "" {
		installed += ", by " + orDash(p.InstalledBy) + " on " + orDash(p.InstalledAt)
	}
	kv("installed", installed)
	kv("runs", fmt.Sprintf("backend %s · %s · egress %d allowed, %d denied", orDash(p.Backend), orDash(p.User), p.Allowed, p.Denied))
	flags := []string{}
	if p.Exempt {
		flags = append(flags, "EXEMPT: runs unsandboxed as the node's user")
	}
	if p.Private {
		flags = append(flags, "private candidate: always sandboxed, never exempt")
	}
	if len(flags) > 0 {
		kv("note", strings.Join(flags, "; "))
	}
	if len(p.Hooks) > 0 || len(p.HooksSee) > 0 || p.HooksProject || p.HooksApprove || p.HooksEgress {
		see := "its own tool calls and the agent's own tools"
		if len(p.HooksSee) > 0 {
			see += "; granted: the calls of " + strings.Join(p.HooksSee, ", ")
		}
		kv("hooks see", see)
		project := "no: hooks do not see the agent's project"
		if p.HooksProject {
			project = "yes: hooks read the agent's project folder, read-only"
		}
		kv("project", project)
		authority := "whole protocol for its own tools; elsewhere only deny, ask, block, stop, context"
		if p.HooksApprove {
			authority = "APPROVED: the whole hook protocol for every tool — they can allow and rewrite the agent's calls (--plugin-hooks-approve)"
		}
		kv("authority", authority)
		network := "only for calls of its own tools; no network when they receive the agent's data"
		if p.HooksEgress {
			network = "GRANTED: the plugin's egress even with the agent's data (--plugin-hooks-egress)"
		}
		kv("hook net", network)
	}

	// The selected server first: that is what the operator opened the pane for.
	order := []int{}
	if r.kind == rowServer {
		order = append(order, r.xi)
	}
	for i := range p.Servers {
		if r.kind != rowServer || i != r.xi {
			order = append(order, i)
		}
	}
	for _, i := range order {
		s := p.Servers[i]
		add("", st.Section.Render("Server "+s.Name)+"  "+st.stateStyle(s.State).Render(strings.ToUpper(stateLabel(s.State))))
		decision := s.Action
		if s.Remote != "" {
			decision = "remote " + s.Remote + " → " + orDash(s.Host) + ", through the egress proxy"
		} else if s.Action == "sandboxed" {
			decision += " in " + s.Sandbox + ", network " + orDash(s.Network)
		} else if s.Network != "" {
			decision += ", network " + s.Network
		}
		kv("decision", decision)
		for _, why := range s.Reasons {
			add(wrapHang(why, w, "    - ", "      ")...)
		}
		if s.Remote == "" {
			kv("user", userWhy(v.st.Node, p, s))
		}
		manifest := "sandbox: " + orDash(s.Declared)
		if s.Reason != "" {
			manifest += ` — reason: "` + s.Reason + `"`
		}
		kv("manifest", manifest)
		run := fmt.Sprintf("%d restarts", s.Restarts)
		if s.PID > 0 {
			run += fmt.Sprintf(", pid %d", s.PID)
		}
		if s.Since != "" {
			run += ", since " + s.Since
		}
		if s.Remote == "" {
			kv("process", run)
		}
		if s.LogDropped > 0 {
			add(st.Warn.Render(strings.Join(wrapKV(st, "stderr", "dropped: "+mib(s.LogDropped)+" (flooding)", w), "\n")))
		}
		if s.NotesDropped > 0 {
			add(st.Warn.Render(strings.Join(wrapKV(st, "notify", fmt.Sprintf("dropped: %d notifications over the node's rate (flooding)", s.NotesDropped), w), "\n")))
		}
		if len(s.LastErr) > 0 {
			add(st.Label.Render("    last stderr"))
			for _, l := range s.LastErr {
				add("      | " + cut(l, w-8))
			}
		}
		if len(s.Tools) > 0 {
			kv("tools", strings.Join(s.Tools, ", "))
		}
		for _, h := range s.Hidden {
			add(st.Warn.Render(strings.Join(wrapKV(st, "hidden", h.Tool+": by the tenant's tool rules, "+h.Rule, w), "\n")))
		}
		if fix := configFix(v.st.Findings, p.Name+"/"+s.Name); fix != "" {
			kv("fix", fix)
		} else if h, ok := exemptHint(p, s); ok {
			kv("hint", "to exempt it (shown, never applied): "+h)
		} else if h != "" {
			kv("hint", h)
		}
	}
	for i, h := range p.Hooks {
		name := h.Event
		if h.Matcher != "" {
			name += " (" + h.Matcher + ")"
		}
		add("", st.Section.Render("Hook "+name))
		kv("decision", h.Action+" "+h.Sandbox)
		for _, why := range h.Reasons {
			add(wrapHang(why, w, "    - ", "      ")...)
		}
		if h.Timeout > 0 {
			t := seconds(h.Timeout)
			if h.Capped {
				kv("timeout", t+" — CAPPED: the manifest asked for more than the node allows")
			} else {
				kv("timeout", t)
			}
		}
		// The policy names a hook's finding by its event and index.
		if fix := configFix(v.st.Findings, fmt.Sprintf("%s/%s[%d]", p.Name, h.Event, i)); fix != "" {
			kv("fix", fix)
		}
	}
	if len(p.Hooks) > 0 {
		add("", st.Section.Render("Recent hook runs")+st.Dim.Render(" — newest first"))
		n := 0
		for _, r := range v.st.HookRuns {
			if r.Plugin != p.Name && r.Plugin != p.ID {
				continue
			}
			add(wrapHang(hookRunLine(r), w, "    ", "      ")...)
			if n++; n == 10 {
				break
			}
		}
		if n == 0 {
			add(st.Dim.Render("    none recorded"))
		}
	}

	add("", st.Section.Render("Manifest egress")+st.Dim.Render(" — and the tenant-list entries that let it through"))
	if len(p.Egress) == 0 {
		add(st.Dim.Render("    none: the plugin reaches no host"))
	}
	for _, e := range p.Egress {
		add(wrapHang(e, w, "    ", "      ")...)
		m := tenantMatches(v.st.Egress.Patterns, egressHost(e))
		switch {
		case len(m) > 0:
			add(st.Good.Render("      tenant list: " + strings.Join(m, ", ")))
		case !v.st.Egress.TenantOK:
			add(st.Bad.Render("      tenant list unreadable: the proxy denies everything"))
		case len(v.st.Egress.Patterns) > 0:
			add(st.Warn.Render("      tenant list: no entry — denied whatever the manifest says"))
		}
	}

	add("", st.Section.Render("Last egress denials"))
	n := 0
	for _, d := range v.st.Egress.Recent {
		if d.Decision != "deny" || (d.Plugin != p.Name && d.Plugin != p.ID) {
			continue
		}
		add(cut(fmt.Sprintf("    %s %s %s:%d — %s", clock(d.Time), orDash(d.Server), d.Host, d.Port, d.Rule), w))
		if n++; n == 10 {
			break
		}
	}
	if n == 0 {
		add(st.Dim.Render("    none recorded"))
	}

	var fs []api.Finding
	for _, f := range v.st.Findings {
		if f.Subject == p.Name || strings.HasPrefix(f.Subject, p.Name+"/") {
			fs = append(fs, f)
		}
	}
	if len(fs) > 0 {
		add("", st.Section.Render("Findings"))
		for _, f := range findingsNewestFirst(fs) {
			add(wrapHang(fmt.Sprintf("%s %s %s: %s", strings.ToUpper(string(f.Severity)), f.Code, f.Subject, f.Message), w, "    ", "      ")...)
			if f.Fix != "" {
				add(st.Hint.Render(strings.Join(wrapHang("fix: "+f.Fix, w, "      ", "        "), "\n")))
			}
		}
	}
	return strings.Join(b, "\n")
}

// wrapKV renders "    key       value" with the value wrapped under itself.
func wrapKV(st Styles, k, val string, w int) []string {
	const indent = "    "
	label := fit(k, 10)
	lines := wrap(val, w-len(indent)-11, "")
	out := make([]string, len(lines))
	for i, l := range lines {
		if i == 0 {
			out[i] = indent + st.Label.Render(label) + " " + l
		} else {
			out[i] = indent + strings.Repeat(" ", 11) + l
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// configFix is the fix of the needs-config finding about subject ("plugin/server"
// or "plugin/Event[i]"): the command that sets the missing value.
func configFix(fs []api.Finding, subject string) string {
	for _, f := range fs {
		if f.Code == api.CodeNeedsConfig && f.Subject == subject {
			return f.Fix
		}
	}
	return ""
}

// hookRunLine is one hook run: when, event (and tool), decision, duration, why.
func hookRunLine(r api.HookRun) string {
	ev := r.Event
	if r.Tool != "" {
		ev += " " + r.Tool
	}
	line := fmt.Sprintf("%s %s %s in %s", clock(r.Time), ev, strings.ToUpper(orDash(r.Decision)), seconds(r.Seconds))
	if r.Source != "" {
		line += " (" + r.Source + ")"
	}
	if r.Network == "isolated" {
		line += " [no network]"
	}
	if r.Reason != "" {
		line += " — " + r.Reason
	}
	if len(r.Dropped) > 0 {
		line += " — DROPPED beyond its authority: " + strings.Join(r.Dropped, ", ")
	}
	return line
}

// seconds renders a duration in seconds as people read it: 30s, 1.5s, 120ms.
func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return strconv.FormatFloat(math.Round(s*100)/100, 'f', -1, 64) + "s"
}

// mib renders a byte count in MiB, one decimal.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
