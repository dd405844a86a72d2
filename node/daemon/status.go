package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/supervise"
)

// NotCovered says, in the operator's words, what the node's isolation does not
// cover on this tier, backend and mode (docs/promises.md §11). gaps are what the
// backend's own probe found it cannot keep here (Landlock: its tier's gaps and
// those of the kernel's Landlock ABI).
func NotCovered(tier int, backend string, mode policy.Mode, root bool, gaps []string) []string {
	if tier == 0 {
		return []string{"no plugin sandbox at all: every plugin runs as the node's user with the node's access"}
	}
	var out []string
	switch backend {
	case policy.BackendBwrap:
		out = append(out, "bubblewrap shares the host kernel: a kernel exploit escapes the sandbox")
	case policy.BackendGVisor:
		out = append(out, "gVisor narrows but still uses the host kernel beneath its own")
	case policy.BackendSeatbelt:
		out = append(out, "Seatbelt holds no memory, process or CPU limits", "Seatbelt has no per-plugin user: plugins run as the node's user")
	case policy.BackendLandlock:
		out = append(out, "Landlock shares the host kernel: a kernel exploit escapes the sandbox")
	}
	out = append(out, gaps...)
	if backend != policy.BackendSeatbelt && !root {
		out = append(out, "no per-plugin users: the node does not run as root", "memory, process and CPU limits only where the node may create cgroups, which a non-root node usually may not")
	}
	switch mode {
	case policy.Auto:
		out = append(out, "auto mode keeps the host network: only the plugin's own code honours the proxy")
	case policy.Off:
		out = append(out, "off mode: plugins other than private candidates run unsandboxed as the node's user")
	}
	return out
}

// backendGaps are the gaps the probe of backend found.
func backendGaps(probes []api.BackendProbe, backend string) []string {
	for _, p := range probes {
		if p.Name == backend && p.Works {
			return p.Gaps
		}
	}
	return nil
}

// Status implements api.Provider: the whole status model, now. Each part has a
// phase of its own: the node, each plugin with its servers and hooks, the
// exemptions and hook grants in force, then the findings.
func (d *Daemon) Status() *api.Status {
	n := d.cfg.Node
	sup := d.sup.Status()
	d.mu.Lock()
	defer d.mu.Unlock()

	st := &api.Status{Plugins: []api.Plugin{}, Exempt: []api.Exemption{}, HookGrants: []api.HookGrant{}, Findings: []api.Finding{}}
	st.HookRuns = append([]api.HookRun(nil), d.hookRuns...)
	st.Node = d.nodeInfo()
	for _, name := range sortedKeys(d.plugins) {
		p := d.plugins[name]
		if p.Decision.Exempt {
			st.Node.Labels["oz0.ai/exempt/"+name] = p.Installed.Commit
		}
		// A scheduler that routes agents' events here can tell which plugins' hooks
		// the operator trusted further (docs/promises.md §10, §15, §16).
		if slices.Contains(n.Config.HookApprove, name) {
			st.Node.Labels["oz0.ai/hooks-approve/"+name] = "true"
		}
		if slices.Contains(n.Config.HookEgress, name) {
			st.Node.Labels["oz0.ai/hooks-egress/"+name] = "true"
		}
		st.Plugins = append(st.Plugins, d.pluginStatus(p, sup))
	}
	for _, name := range sortedKeys(d.held) {
		if _, planned := d.plugins[name]; !planned {
			st.Plugins = append(st.Plugins, d.heldStatus(name, d.held[name]))
		}
	}
	slices.SortFunc(st.Plugins, func(a, b api.Plugin) int { return strings.Compare(a.Name, b.Name) })
	for _, e := range n.Config.Exemptions {
		st.Exempt = append(st.Exempt, d.exemptionStatus(e))
	}
	for _, g := range n.Config.HookGrants {
		st.HookGrants = append(st.HookGrants, d.hookGrantStatus(g))
	}
	st.Findings = d.findingsNow()
	if d.cfg.Egress != nil {
		st.Findings = append(st.Findings, d.cfg.Egress.Findings()...)
		st.Egress.Recent = d.cfg.Egress.Recent(50)
		st.Egress.Patterns, st.Egress.TenantOK = d.cfg.Egress.Tenant()
	}
	st.Egress.TenantList = n.Dir.TenantList()
	var ruleFindings []api.Finding
	st.ToolRules, ruleFindings = d.toolRulesStatus()
	st.Findings = append(st.Findings, ruleFindings...)
	if d.book != nil {
		st.Approvals, st.ApprovalWait = d.book.List(), d.book.Wait.String()
	}
	api.SortFindings(st.Findings)
	st.Node.Health = health(st)
	return st
}

// nodeInfo is the node as a whole: its tier, backend, mode, plugin users and
// labels (the operator's and the derived ones).
func (d *Daemon) nodeInfo() api.NodeInfo {
	n := d.cfg.Node
	users := "per-plugin"
	switch {
	case n.Tier == 0:
		users = "none: tier 0 runs every plugin as the node's user"
	case n.OS != "linux":
		users = "none: Seatbelt has no per-plugin users"
	case !n.Root:
		users = "none: the node does not run as root"
	case !n.Traversable:
		users = "none: the data folder is under " + n.Blocker + ", which other users cannot traverse"
	}
	labels := map[string]string{}
	for k, v := range n.Config.Labels {
		labels[k] = v
	}
	labels["oz0.ai/tier"] = fmt.Sprint(n.Tier)
	labels["oz0.ai/backend"] = n.Backend
	labels["oz0.ai/mode"] = string(n.Config.Mode)
	return api.NodeInfo{
		Version: d.cfg.Version, PID: os.Getpid(), Started: d.started.UTC().Format(time.RFC3339),
		DataDir: n.Dir.Root, OS: n.OS, Root: n.Root, Tier: n.Tier, Backend: n.Backend,
		Backends: d.cfg.Probes, Mode: string(n.Config.Mode), Labels: labels,
		NotCovers: NotCovered(n.Tier, n.Backend, n.Config.Mode, n.Root, backendGaps(d.cfg.Probes, n.Backend)), Users: users,
		Control: n.Dir.Control(), MCP: n.Dir.MCP(), Run: n.Config.InStatus(),
		Updated: time.Now().UTC().Format(time.RFC3339), Uptime: time.Since(d.started).Round(time.Second).String(),
	}
}

// pluginStatus is one plugin as last planned: its decision, egress counts and
// endpoint, servers and hooks. d.mu is held.
func (d *Daemon) pluginStatus(p *plan.Plugin, sup map[string]supervise.Status) api.Plugin {
	n := d.cfg.Node
	name, dec := p.Installed.Name, p.Decision
	ap := api.Plugin{
		Name: name, ID: p.Manifest.ID(), Version: p.Manifest.Version, Commit: p.Installed.Commit,
		Source: p.Installed.Source, InstalledBy: p.Installed.InstalledBy,
		InstalledAt: p.Installed.InstalledAt.UTC().Format(time.RFC3339),
		Private:     p.Installed.Private, Exempt: dec.Exempt, User: dec.User.String(), UID: int(dec.User.UID),
		Backend: dec.Backend, Servers: []api.Server{},
		TLSTrustD: slices.Contains(n.Config.TrustD, name),
		ROPaths:   n.Config.ROPaths[name],
	}
	if d.cfg.Denials != nil {
		ap.SandboxDenials = d.cfg.Denials(name)
	}
	for _, e := range p.Manifest.Egress {
		ap.Egress = append(ap.Egress, egressText(e.Host, e.Ports, e.Reason))
	}
	if d.cfg.Egress != nil {
		ap.Allowed, ap.Denied = d.cfg.Egress.Counts(name)
		ap.Refused = d.cfg.Egress.Refusals(name)
		ap.ProxyPort, _ = d.cfg.Egress.Endpoint(name, "")
	}
	for _, s := range p.Manifest.Servers {
		ap.Servers = append(ap.Servers, d.serverStatus(p, s, sup))
	}
	// A plugin none of whose servers runs is shown as not started, not with the
	// backend and user it would have had.
	if len(ap.Servers) > 0 && !slices.ContainsFunc(ap.Servers, func(sv api.Server) bool { return sv.State != api.StateRefused }) {
		ap.Backend, ap.User, ap.UID = policy.BackendNone, "not started (refused)", 0
	}
	for i, h := range p.Manifest.Hooks {
		t := dec.Hooks[i]
		_, capped := policy.HookTimeout(h)
		ap.Hooks = append(ap.Hooks, api.Hook{Event: h.Event, Matcher: h.Matcher, Action: string(t.Action), Sandbox: t.Backend, Reasons: t.Reasons,
			Timeout: t.Timeout.Seconds(), Capped: capped})
	}
	ap.HooksSee = policy.HooksSeeOf(n.Config.HookGrants, name)
	ap.HooksProject = slices.Contains(n.Config.HookProject, name)
	ap.HooksApprove = slices.Contains(n.Config.HookApprove, name)
	ap.HooksEgress = slices.Contains(n.Config.HookEgress, name)
	ap.Secrets = p.Secrets()
	return ap
}

// serverStatus is one server: its decision and, from the supervisor, its state,
// restarts and last stderr. d.mu is held.
func (d *Daemon) serverStatus(p *plan.Plugin, s manifest.Server, sup map[string]supervise.Status) api.Server {
	name := p.Installed.Name
	t, _ := p.Decision.Server(s.Name)
	as := api.Server{
		Name: s.Name, Action: string(t.Action), Sandbox: t.Backend, Network: string(t.Network),
		User: t.User.String(), UID: int(t.User.UID), Reasons: t.Reasons, Declared: string(s.Sandbox), Reason: s.Reason,
		Tools: d.tools[key(name, s.Name)],
	}
	hidden := d.gw.Hidden(name, s.Name)
	for _, tool := range sortedKeys(hidden) {
		as.Hidden = append(as.Hidden, api.HiddenTool{Tool: tool, Rule: hidden[tool]})
	}
	if s.IsRemote() {
		as.Remote = s.Remote.Type
		if host, port, err := policy.RemoteHostPort(s.Remote.URL); err == nil {
			as.Host = net.JoinHostPort(host, strconv.Itoa(port))
		}
	}
	if d.cfg.Egress != nil {
		as.ProxyPort, _ = d.cfg.Egress.Endpoint(name, s.Name)
	}
	us, ok := sup[key(name, s.Name)]
	switch {
	case t.Action == policy.Refused:
		as.State = api.StateRefused
	case ok:
		as.State, as.Restarts, as.LogDropped = us.State, us.Restarts, us.LogDropped
		as.OperatorRestarts, as.LastRestart = us.OperatorRestarts, us.LastRestart
		as.NotesDropped = d.notesDroppedOf(name, s.Name)
		as.Since = us.Since.UTC().Format(time.RFC3339)
		if us.LastErr != "" {
			as.LastErr = append(as.LastErr, us.LastErr)
		}
		if lines, err := d.sup.Logs(key(name, s.Name), 5); err == nil && (us.State == api.StateCrashed || us.State == api.StateBackingOff || us.State == api.StateUnresponsive) {
			as.LastErr = append(as.LastErr, lines...)
		}
	default:
		as.State = api.StateNotStarted
	}
	return as
}

// exemptionStatus says what one --plugin-sandbox-exempt matches now. d.mu is held.
func (d *Daemon) exemptionStatus(e policy.Exemption) api.Exemption {
	ex := api.Exemption{Flag: e.String(), Plugin: e.Name, Commit: e.Commit, Matches: "nothing",
		Detail: "no plugin of that name is installed; it covers whatever is installed under that name next"}
	p, ok := d.plugins[e.Name]
	if !ok {
		return ex
	}
	m := policy.MatchExemptions([]policy.Exemption{e}, e.Name, p.Installed.Commit)
	switch {
	case p.Installed.Private:
		ex.Matches, ex.Detail = "ignored-private", "private candidates are never exempt"
	case m.Matched != "" && e.Commit == "":
		ex.Matches, ex.Detail = "name", "exempts "+e.Name+" at any commit (now "+short(p.Installed.Commit)+")"
	case m.Matched != "":
		ex.Matches, ex.Detail = "commit", "exempts "+e.Name+" at "+short(p.Installed.Commit)
	default:
		ex.Matches, ex.Detail = "commit-mismatch", "installed commit is "+short(p.Installed.Commit)+"; the exemption does not apply"
	}
	return ex
}

// hookGrantStatus says whether both plugins of one --plugin-hooks-see grant are
// installed. d.mu is held.
func (d *Daemon) hookGrantStatus(g policy.HookGrant) api.HookGrant {
	hg := api.HookGrant{Flag: g.String(), Watcher: g.Watcher, Other: g.Other, Matches: "both",
		Detail: "the hooks of " + g.Watcher + " see the arguments and results of " + g.Other + "'s tool calls and can block them"}
	var missing []string
	for _, name := range []string{g.Watcher, g.Other} {
		if _, ok := d.plugins[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		hg.Matches, hg.Detail = "missing", strings.Join(missing, " and ")+" not installed; it covers whatever is installed under that name next"
	}
	return hg
}

// findingsNow are the node's findings (from start and the last plan, each with
// when it was first seen) and those raised since. d.mu is held.
func (d *Daemon) findingsNow() []api.Finding {
	out := []api.Finding{}
	now := time.Now().UTC().Format(time.RFC3339)
	for _, f := range append(append([]api.Finding(nil), d.cfg.NodeFindings...), d.planF...) {
		k := f.Code + "|" + f.Subject
		if d.seen[k] == "" {
			d.seen[k] = now
		}
		f.Time = d.seen[k]
		out = append(out, f)
	}
	for _, k := range sortedKeys(d.findings) {
		out = append(out, d.findings[k])
	}
	return out
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func egressText(host string, ports []int, reason string) string {
	s := host
	if len(ports) > 0 {
		ps := make([]string, len(ports))
		for i, p := range ports {
			ps[i] = fmt.Sprint(p)
		}
		s += ":" + strings.Join(ps, ",")
	}
	if reason != "" {
		s += " — " + reason
	}
	return s
}

func health(st *api.Status) string {
	for _, f := range st.Findings {
		if f.Severity == api.SevCritical {
			return "failing"
		}
	}
	for _, p := range st.Plugins {
		for _, s := range p.Servers {
			if s.State == api.StateCrashed || s.State == api.StateBackingOff || s.State == api.StateUnresponsive || s.State == api.StateHeld {
				return "degraded"
			}
		}
	}
	for _, f := range st.Findings {
		if f.Severity == api.SevError {
			return "degraded"
		}
	}
	return "ok"
}

// writeStatus writes status.json and health.json atomically. Their mode follows
// the umask in force (077 by default: owner-only). A write that fails raises the
// disk finding (wrote); it reports whether any failed, to be tried again.
func (d *Daemon) writeStatus(st *api.Status) (failed bool) {
	dir := d.cfg.Node.Dir
	b, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		err = datadir.WriteFileAtomic(dir.Status(), append(b, '\n'), d.fileMode)
	}
	if err != nil {
		d.log.Error("write status", "err", err)
	}
	failed = d.wrote(dir.Status(), err)
	h := api.Health{Status: st.Node.Health, PID: st.Node.PID, Updated: st.Node.Updated, Tier: st.Node.Tier}
	for _, p := range st.Plugins {
		for _, s := range p.Servers {
			switch s.State {
			case api.StateRunning, api.StateExemptRun, api.StateUnsandboxed:
				h.Running++
			case api.StateRefused:
				h.Refused++
			case api.StateCrashed, api.StateBackingOff, api.StateUnresponsive:
				h.Crashed++
			}
		}
	}
	for _, f := range st.Findings {
		if f.Severity == api.SevCritical {
			h.Critical++
		}
	}
	b, _ = json.MarshalIndent(h, "", "  ")
	err = datadir.WriteFileAtomic(dir.Health(), append(b, '\n'), d.fileMode)
	if err != nil {
		d.log.Error("write health", "err", err)
	}
	return d.wrote(dir.Health(), err) || failed
}
