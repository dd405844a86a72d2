package tui

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"oz0.ai/node/node/api"
)

// maxRecentEgress bounds the egress decisions kept from the stream.
const maxRecentEgress = 500

// applyEvent folds one event of the stream into the status the TUI shows and says
// in a few words what changed ("" when nothing did). It never panics: an event of an
// unknown type, or one without its payload, changes nothing. Every string of the
// event is passed through oneLine first (the event's payload is changed in place).
func applyEvent(st *api.Status, ev api.Event) (*api.Status, string) {
	// Plugin-supplied text in the event becomes inert before anything keeps it.
	cleanAll(&ev)
	switch ev.Type {
	case "status":
		if ev.Status == nil {
			return st, ""
		}
		return ev.Status, ""
	}
	if st == nil {
		// Updates before the first full status have nothing to apply to.
		return st, ""
	}
	switch ev.Type {
	case "server":
		se := ev.Server
		if se == nil {
			return st, ""
		}
		for i := range st.Plugins {
			p := &st.Plugins[i]
			if p.Name != se.Plugin && p.ID != se.Plugin {
				continue
			}
			for j := range p.Servers {
				s := &p.Servers[j]
				if s.Name != se.Server {
					continue
				}
				s.State = se.State
				if ev.Time != "" {
					s.Since = ev.Time
				}
				note := fmt.Sprintf("%s/%s is now %s", p.Name, s.Name, se.State)
				if se.Detail != "" {
					note += ": " + se.Detail
				}
				return st, note
			}
		}
		return st, ""
	case "finding":
		f := ev.Finding
		if f == nil {
			return st, ""
		}
		nf := *f
		if nf.Time == "" {
			nf.Time = ev.Time
		}
		for i := range st.Findings {
			if st.Findings[i].Code == nf.Code && st.Findings[i].Subject == nf.Subject {
				st.Findings[i] = nf
				return st, "finding " + nf.Code + " updated: " + nf.Subject
			}
		}
		st.Findings = append(st.Findings, nf)
		return st, "new finding " + nf.Code + ": " + nf.Subject
	case "egress":
		d := ev.Egress
		if d == nil {
			return st, ""
		}
		st.Egress.Recent = append([]api.EgressDecision{*d}, st.Egress.Recent...)
		if len(st.Egress.Recent) > maxRecentEgress {
			st.Egress.Recent = st.Egress.Recent[:maxRecentEgress]
		}
		for i := range st.Plugins {
			p := &st.Plugins[i]
			if p.Name != d.Plugin && p.ID != d.Plugin {
				continue
			}
			if d.Decision == "deny" {
				p.Denied++
			} else {
				p.Allowed++
			}
		}
		if d.Decision == "deny" {
			return st, fmt.Sprintf("egress denied: %s → %s:%d", d.Plugin, d.Host, d.Port)
		}
		return st, ""
	}
	return st, ""
}

// findingsNewestFirst returns the findings newest first; findings raised at the same
// time (or without a time) keep the node's order: most severe first.
func findingsNewestFirst(in []api.Finding) []api.Finding {
	fs := append([]api.Finding(nil), in...)
	api.SortFindings(fs)
	sort.SliceStable(fs, func(i, j int) bool {
		return parseTime(fs[i].Time).After(parseTime(fs[j].Time))
	})
	return fs
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// clock renders an RFC 3339 time as the local-to-the-node wall clock hh:mm:ss.
func clock(s string) string {
	t := parseTime(s)
	if t.IsZero() {
		return s
	}
	return t.UTC().Format("15:04:05")
}

// uptime says how long the node has run, from its start time when it gave one.
func uptime(n api.NodeInfo, now time.Time) string {
	t := parseTime(n.Started)
	if t.IsZero() || now.Before(t) {
		return n.Uptime
	}
	return humanDuration(now.Sub(t))
}

func humanDuration(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func shortCommit(c string, n int) string {
	if len(c) > n {
		return c[:n]
	}
	return c
}

// shortUser keeps what fits a table cell of a user description: "uid 1914252522
// (plugin user)" becomes "uid 1914252522"; the detail pane has the rest.
func shortUser(u string) string {
	if i := strings.Index(u, " ("); i > 0 {
		return u[:i]
	}
	return u
}

// stateLabel is a server state as the table shows it.
func stateLabel(s string) string {
	switch s {
	case api.StateExemptRun:
		return "exempt"
	case api.StateUnsandboxed:
		return "unsandboxed"
	case "":
		return "?"
	}
	return s
}

// stateRank orders states by how much they need the operator's eye.
func stateRank(s string) int {
	switch s {
	case api.StateHeld:
		return 9
	case api.StateUnresponsive:
		return 8
	case api.StateCrashed:
		return 7
	case api.StateBackingOff:
		return 6
	case api.StateRefused:
		return 5
	case api.StateStarting:
		return 4
	case api.StateExemptRun, api.StateUnsandboxed:
		return 3
	case api.StateRunning:
		return 2
	case api.StateStopped, api.StateNotStarted:
		return 1
	}
	return 0
}

// pluginState is the state of a plugin's most worrying server.
func pluginState(p api.Plugin) string {
	if p.Held != "" {
		return api.StateHeld
	}
	worst := ""
	for _, s := range p.Servers {
		if worst == "" || stateRank(s.State) > stateRank(worst) {
			worst = s.State
		}
	}
	if worst == "" && len(p.Hooks) > 0 {
		return "hooks only"
	}
	if worst == "" {
		return "no servers"
	}
	return worst
}

func pluginRestarts(p api.Plugin) int {
	n := 0
	for _, s := range p.Servers {
		n += s.Restarts
	}
	return n
}

// userWhy says which user a server runs as and why, in the operator's words.
func userWhy(n api.NodeInfo, p api.Plugin, s api.Server) string {
	user := s.User
	if user == "" {
		user = p.User
	}
	switch {
	case s.State == api.StateRefused || s.Action == "refused":
		return "not started (refused)"
	case p.Exempt || s.State == api.StateExemptRun:
		return user + " — exempt: runs unsandboxed as the node's user"
	case s.Action == "unsandboxed":
		return user + " — unsandboxed (mode " + n.Mode + ", tier " + fmt.Sprint(n.Tier) + "): runs as the node's user"
	case s.UID > 0 || p.UID > 0:
		return user + " — a user of the plugin's own on a root node"
	case n.Users != "" && n.Users != "per-plugin":
		return user + " — " + n.Users
	}
	return user
}

// userWhyShort is why a server runs as the user it does, in a table cell's words.
func userWhyShort(n api.NodeInfo, p api.Plugin, s api.Server) string {
	switch {
	case s.State == api.StateRefused || s.Action == "refused":
		if s.Declared == "host" || s.Declared == "own" {
			return "refused: sandbox: " + s.Declared
		}
		if len(s.Reasons) > 0 {
			return "refused: " + s.Reasons[0]
		}
		return "refused"
	case p.Exempt || s.State == api.StateExemptRun:
		return "exempt: runs as the node's user"
	case s.Action == "unsandboxed" && n.Tier == 0:
		return "tier 0: runs as the node's user"
	case s.Action == "unsandboxed":
		return "mode " + n.Mode + ": runs as the node's user"
	case s.UID > 0:
		return "own uid on a root node"
	case n.Users != "" && n.Users != "per-plugin":
		return n.Users
	}
	return ""
}

// exemptHint is the flag that would exempt a refused server, for the operator to
// copy: shown, never applied. ok is false when no flag could help.
func exemptHint(p api.Plugin, s api.Server) (hint string, ok bool) {
	if s.State != api.StateRefused && s.Action != "refused" {
		return "", false
	}
	if s.Declared != "host" && s.Declared != "own" {
		return "", false // refused for another reason (gVisor, uid collision…): no flag helps
	}
	if p.Private {
		return "private candidates are never exempt: install it from its repository to make it exemptable", false
	}
	flag := "--plugin-sandbox-exempt " + p.Name
	if p.Commit != "" {
		flag += "@" + p.Commit
	}
	return flag, true
}

// egressHost is the host of a manifest egress entry "host:ports — reason".
func egressHost(e string) string {
	target, _, _ := strings.Cut(e, " — ")
	target = strings.TrimSpace(target)
	if i := strings.IndexByte(target, ':'); i >= 0 && !strings.HasPrefix(target, "[") {
		target = target[:i]
	}
	return target
}

// tenantMatches lists the tenant-list patterns that let a manifest egress host
// through: the proxy allows a host only if both lists do.
func tenantMatches(patterns []string, host string) []string {
	var out []string
	for _, t := range patterns {
		th := t
		if i := strings.LastIndexByte(th, ':'); i >= 0 && !strings.HasSuffix(th, "]") {
			th = th[:i]
		}
		switch {
		case th == host:
			out = append(out, t)
		case strings.HasPrefix(th, ".") && strings.HasSuffix(host, th):
			out = append(out, t)
		}
	}
	return out
}

// exemptionWords says what an exemption matches and, if it does not exempt what it
// seems to, the warning.
func exemptionWords(e api.Exemption, plugins []api.Plugin) (matches, warning string) {
	installed := ""
	for _, p := range plugins {
		if p.Name == e.Plugin {
			installed = p.Commit
		}
	}
	switch e.Matches {
	case "name":
		return fmt.Sprintf("%s at any commit (installed %s)", e.Plugin, shortCommit(installed, 12)), ""
	case "commit":
		return fmt.Sprintf("%s at %s", e.Plugin, shortCommit(e.Commit, 12)), ""
	case "commit-mismatch":
		w := fmt.Sprintf("commit does not match: %s is installed at %s, so this flag exempts nothing", e.Plugin, shortCommit(installed, 12))
		if installed == "" {
			w = "commit does not match the installed one, so this flag exempts nothing"
		}
		return "nothing", w
	case "nothing":
		return "nothing", "matches no installed plugin"
	case "ignored-private":
		return "nothing", e.Plugin + " is a private candidate, never exempt: the flag is ignored"
	}
	return e.Matches, ""
}

// exemptionHint is a copy-ready flag that would make a mismatched exemption match.
func exemptionHint(e api.Exemption, plugins []api.Plugin) string {
	if e.Matches != "commit-mismatch" {
		return ""
	}
	for _, p := range plugins {
		if p.Name == e.Plugin && p.Commit != "" {
			return "--plugin-sandbox-exempt " + p.Name + "@" + p.Commit
		}
	}
	return ""
}

// exemptionsInForce lists the flags that exempt something, and counts the others.
func exemptionsInForce(es []api.Exemption) (inForce []string, warnings int) {
	for _, e := range es {
		if e.Matches == "name" || e.Matches == "commit" {
			inForce = append(inForce, e.Flag)
		} else {
			warnings++
		}
	}
	return inForce, warnings
}

func sortedLabels(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
