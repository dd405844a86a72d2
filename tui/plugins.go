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
	case api.StateCrashed, api.StateBackingOff, api.StateUnresponsive:
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
	p := v.st.Plugins[r.pi]
	d := &detail{st: v.styles, w: max(20, v.w), status: v.st}
	d.plugin(p)
	d.hookAuthority(p)
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
		d.server(p, p.Servers[i])
	}
	d.hooks(p)
	d.hookRuns(p)
	d.manifestEgress(p)
	d.denials(p)
	d.findings(p)
	return strings.Join(d.lines, "\n")
}

// detail is the detail pane being written, a part at a time.
type detail struct {
	st     Styles
	w      int
	status *api.Status
	lines  []string
}

func (d *detail) add(s ...string) { d.lines = append(d.lines, s...) }

// kv adds "key value", the value wrapped under itself.
func (d *detail) kv(k, val string) { d.add(wrapKV(d.st, k, val, d.w)...) }

// warnKV adds a key and value in the warning style.
func (d *detail) warnKV(k, val string) {
	d.add(d.st.Warn.Render(strings.Join(wrapKV(d.st, k, val, d.w), "\n")))
}

// plugin is the head: name, where it came from, how it runs, what is special.
func (d *detail) plugin(p api.Plugin) {
	st := d.st
	d.add(st.Title.Render(p.Name) + st.Dim.Render("  "+strings.TrimSpace(p.ID+" "+p.Version)))
	installed := "repository " + orDash(p.Source) + " at commit " + orDash(p.Commit)
	if p.InstalledBy != "" || p.InstalledAt != "" {
		installed += ", by " + orDash(p.InstalledBy) + " on " + orDash(p.InstalledAt)
	}
	d.kv("installed", installed)
	if p.Held != "" {
		d.add(st.Bad.Render(strings.Join(wrapKV(st, "HELD", "not started: "+p.Held, d.w), "\n")))
	}
	d.kv("runs", fmt.Sprintf("backend %s · %s · egress %d allowed, %d denied", orDash(p.Backend), orDash(p.User), p.Allowed, p.Denied))
	flags := []string{}
	if p.Exempt {
		flags = append(flags, "EXEMPT: runs unsandboxed as the node's user")
	}
	if p.Private {
		flags = append(flags, "private candidate: always sandboxed, never exempt")
	}
	if len(flags) > 0 {
		d.kv("note", strings.Join(flags, "; "))
	}
}

// hookAuthority is what a plugin with hooks sees, may answer and may reach.
func (d *detail) hookAuthority(p api.Plugin) {
	if len(p.Hooks) == 0 && len(p.HooksSee) == 0 && !p.HooksProject && !p.HooksApprove && !p.HooksEgress {
		return
	}
	see := "its own tool calls and the agent's own tools"
	if len(p.HooksSee) > 0 {
		see += "; granted: the calls of " + strings.Join(p.HooksSee, ", ")
	}
	d.kv("hooks see", see)
	project := "no: hooks do not see the agent's project"
	if p.HooksProject {
		project = "yes: hooks read the agent's project folder, read-only"
	}
	d.kv("project", project)
	authority := "whole protocol for its own tools; elsewhere only deny, ask, block, stop, context"
	if p.HooksApprove {
		authority = "APPROVED: the whole hook protocol for every tool — they can allow and rewrite the agent's calls (--plugin-hooks-approve)"
	}
	d.kv("authority", authority)
	network := "only for calls of its own tools; no network when they receive the agent's data"
	if p.HooksEgress {
		network = "GRANTED: the plugin's egress even with the agent's data (--plugin-hooks-egress)"
	}
	d.kv("hook net", network)
}

// server is one server's part: the decision and why, its user, manifest,
// process, what was dropped, its last stderr, its tools, and the fix or hint.
func (d *detail) server(p api.Plugin, s api.Server) {
	st, w := d.st, d.w
	d.add("", st.Section.Render("Server "+s.Name)+"  "+st.stateStyle(s.State).Render(strings.ToUpper(stateLabel(s.State))))
	decision := s.Action
	if s.Remote != "" {
		decision = "remote " + s.Remote + " → " + orDash(s.Host) + ", through the egress proxy"
	} else if s.Action == "sandboxed" {
		decision += " in " + s.Sandbox + ", network " + orDash(s.Network)
	} else if s.Network != "" {
		decision += ", network " + s.Network
	}
	d.kv("decision", decision)
	for _, why := range s.Reasons {
		d.add(wrapHang(why, w, "    - ", "      ")...)
	}
	if s.Remote == "" {
		d.kv("user", userWhy(d.status.Node, p, s))
	}
	manifest := "sandbox: " + orDash(s.Declared)
	if s.Reason != "" {
		manifest += ` — reason: "` + s.Reason + `"`
	}
	d.kv("manifest", manifest)
	run := fmt.Sprintf("%d restarts", s.Restarts)
	if s.OperatorRestarts > 0 {
		run += fmt.Sprintf(" (+%d by the operator)", s.OperatorRestarts)
	}
	if s.PID > 0 {
		run += fmt.Sprintf(", pid %d", s.PID)
	}
	if s.Since != "" {
		run += ", since " + s.Since
	}
	if s.Remote == "" {
		d.kv("process", run)
	}
	if s.LastRestart != "" {
		d.kv("restarted", s.LastRestart)
	}
	if s.LogDropped > 0 {
		d.warnKV("stderr", "dropped: "+mib(s.LogDropped)+" (flooding)")
	}
	if s.NotesDropped > 0 {
		d.warnKV("notify", fmt.Sprintf("dropped: %d notifications over the node's rate (flooding)", s.NotesDropped))
	}
	if len(s.LastErr) > 0 {
		d.add(st.Label.Render("    last stderr"))
		for _, l := range s.LastErr {
			d.add("      | " + cut(l, w-8))
		}
	}
	if len(s.Tools) > 0 {
		d.kv("tools", strings.Join(s.Tools, ", "))
	}
	for _, h := range s.Hidden {
		d.warnKV("hidden", h.Tool+": by the tenant's tool rules, "+h.Rule)
	}
	if fix := configFix(d.status.Findings, p.Name+"/"+s.Name); fix != "" {
		d.kv("fix", fix)
	} else if h, ok := exemptHint(p, s); ok {
		d.kv("hint", "to exempt it (shown, never applied): "+h)
	} else if h != "" {
		d.kv("hint", h)
	}
}

// hooks is each hook's decision, why, its timeout and its fix.
func (d *detail) hooks(p api.Plugin) {
	for i, h := range p.Hooks {
		name := h.Event
		if h.Matcher != "" {
			name += " (" + h.Matcher + ")"
		}
		d.add("", d.st.Section.Render("Hook "+name))
		d.kv("decision", h.Action+" "+h.Sandbox)
		for _, why := range h.Reasons {
			d.add(wrapHang(why, d.w, "    - ", "      ")...)
		}
		if h.Timeout > 0 {
			t := seconds(h.Timeout)
			if h.Capped {
				d.kv("timeout", t+" — CAPPED: the manifest asked for more than the node allows")
			} else {
				d.kv("timeout", t)
			}
		}
		// The policy names a hook's finding by its event and index.
		if fix := configFix(d.status.Findings, fmt.Sprintf("%s/%s[%d]", p.Name, h.Event, i)); fix != "" {
			d.kv("fix", fix)
		}
	}
}

// hookRuns is the plugin's last ten hook runs, newest first.
func (d *detail) hookRuns(p api.Plugin) {
	if len(p.Hooks) == 0 {
		return
	}
	st := d.st
	d.add("", st.Section.Render("Recent hook runs")+st.Dim.Render(" — newest first"))
	n := 0
	for _, r := range d.status.HookRuns {
		if r.Plugin != p.Name && r.Plugin != p.ID {
			continue
		}
		d.add(wrapHang(hookRunLine(r), d.w, "    ", "      ")...)
		if n++; n == 10 {
			break
		}
	}
	if n == 0 {
		d.add(st.Dim.Render("    none recorded"))
	}
}

// manifestEgress is each host the manifest asks for and the tenant-list entries
// that let it through, or why nothing does.
func (d *detail) manifestEgress(p api.Plugin) {
	st, eg := d.st, d.status.Egress
	d.add("", st.Section.Render("Manifest egress")+st.Dim.Render(" — and the tenant-list entries that let it through"))
	if len(p.Egress) == 0 {
		d.add(st.Dim.Render("    none: the plugin reaches no host"))
	}
	for _, e := range p.Egress {
		d.add(wrapHang(e, d.w, "    ", "      ")...)
		m := tenantMatches(eg.Patterns, egressHost(e))
		switch {
		case len(m) > 0:
			d.add(st.Good.Render("      tenant list: " + strings.Join(m, ", ")))
		case !eg.TenantOK:
			d.add(st.Bad.Render("      tenant list unreadable: the proxy denies everything"))
		case len(eg.Patterns) > 0:
			d.add(st.Warn.Render("      tenant list: no entry — denied whatever the manifest says"))
		}
	}
}

// denials is the plugin's last ten egress denials.
func (d *detail) denials(p api.Plugin) {
	st := d.st
	d.add("", st.Section.Render("Last egress denials"))
	n := 0
	for _, e := range d.status.Egress.Recent {
		if e.Decision != "deny" || (e.Plugin != p.Name && e.Plugin != p.ID) {
			continue
		}
		d.add(cut(fmt.Sprintf("    %s %s %s:%d — %s", clock(e.Time), orDash(e.Server), e.Host, e.Port, e.Rule), d.w))
		if n++; n == 10 {
			break
		}
	}
	if n == 0 {
		d.add(st.Dim.Render("    none recorded"))
	}
}

// findings is the findings about the plugin or its servers and hooks, newest
// first, each with its fix.
func (d *detail) findings(p api.Plugin) {
	var fs []api.Finding
	for _, f := range d.status.Findings {
		if f.Subject == p.Name || strings.HasPrefix(f.Subject, p.Name+"/") {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return
	}
	d.add("", d.st.Section.Render("Findings"))
	for _, f := range findingsNewestFirst(fs) {
		d.add(wrapHang(fmt.Sprintf("%s %s %s: %s", strings.ToUpper(string(f.Severity)), f.Code, f.Subject, f.Message), d.w, "    ", "      ")...)
		if f.Fix != "" {
			d.add(d.st.Hint.Render(strings.Join(wrapHang("fix: "+f.Fix, d.w, "      ", "        "), "\n")))
		}
	}
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
