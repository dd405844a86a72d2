// Package plan joins what is installed with what the node is: it loads each
// installed plugin's manifest, asks the policy for a decision with this node's facts
// (mode, tier, backend, exemptions, root, data folder) and builds the sandbox Spec of
// a server, a hook or an `exec`. It is recomputed on every start and every call;
// nothing here is cached from install time (docs/promises.md §9).
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/netrule"
	"oz0.ai/node/node/pluginuser"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/userconf"
	"oz0.ai/node/node/view"
)

// Node are the facts of this node that every decision depends on. New builds it
// once; nothing changes it afterwards. What a running node learns later comes to
// the call that needs it: a start's egress endpoint (Proxy) to the spec methods,
// a plugin whose folders its user cannot reach (Learned) to PlanLearned and
// OneLearned.
type Node struct {
	Dir    datadir.Dir
	Config config.Run
	OS     string // linux or darwin
	Root   bool
	// Tier is 1 when Backend works, 0 when no backend does.
	Tier    int
	Backend string // the working default backend: bwrap, gvisor, seatbelt or none
	GVisor  bool   // gVisor works here (for plugins raised to it)
	// NodeBinary is bound read-only into Linux sandboxes for the egress bridge.
	NodeBinary string
	Runtimes   []string
	// Traversable is false when the data folder lies under a folder others cannot
	// traverse; Blocker names that folder.
	Traversable bool
	Blocker     string
	Limits      sandbox.Limits
	// Tenant reads the tenant's egress list as it stands (a remote server's host
	// must be on it); nil leaves that to the proxy alone.
	Tenant func() *netrule.TenantList

	mu sync.Mutex
	// manifests caches parsed manifests by installed commit folder: an installed
	// commit never changes (a reinstall of it is a no-op), so parsing it again on
	// every call would only cost time. Decisions are never cached.
	manifests map[string]*manifest.Manifest
	records   map[string]*installed.Plugin
	// collide is the uid-collision map of the last Plan over every installed plugin.
	collide map[string]string
}

// Plugin is one installed plugin with its decision for this node, now.
type Plugin struct {
	Installed *installed.Plugin
	// Manifest is expanded for this installation (placeholders replaced).
	Manifest *manifest.Manifest
	Decision policy.Decision
	// Unresolved are the references the operator's values left open; the servers
	// and hooks using them are refused (needs-config).
	Unresolved []manifest.Unresolved
	// shown is Manifest with every operator value that is not a public userConfig
	// key replaced by Redacted.
	shown *manifest.Manifest
	// secrets are those values, longest first, for Redact.
	secrets []string
	// secretRules are what the plugin's proxy endpoints put in for the sentinels
	// its tools hold; bindings are the same as status shows them (no values).
	secretRules []egressrule.Secret
	bindings    []api.SecretBinding
	node        *Node
}

// Redacted stands in for a secret value wherever the node shows a manifest.
const Redacted = "[redacted]"

// Redact replaces every secret value of the operator's in text (an error that
// quotes a URL or a header, say) by Redacted.
func (p *Plugin) Redact(text string) string {
	for _, v := range p.secrets {
		text = strings.ReplaceAll(text, v, Redacted)
		if q := url.QueryEscape(v); q != v {
			text = strings.ReplaceAll(text, q, Redacted)
		}
	}
	return text
}

// Shown is the plugin with the operator's secret values redacted: what status,
// plugin show and sandbox show may print. Never start anything from it.
func (p *Plugin) Shown() *Plugin {
	c := *p
	c.Manifest = p.shown
	return &c
}

// Learned are what a running node learns about its plugins as it starts them: per
// plugin, why its folders are out of its user's reach (its next decision then runs
// it as the node's user, and says why). The daemon keeps them.
type Learned struct {
	UserUnreachable map[string]string
}

// Proxy is how one start reaches the node's egress proxy: Sockets when the
// endpoint's socket is served under <data>/run/egress (a running node, or exec and
// hook serving their own), and, where the sandbox reaches the proxy on the host's
// loopback (sandbox.HostPort), the endpoint's port and the credential it requires.
// The zero Proxy leaves a sandbox on the proxy network with no way out.
type Proxy struct {
	Sockets    bool
	Port       int
	Credential string
}

// Plan decides for every installed plugin. Findings cover exemptions that match
// nothing and plugins whose manifest no longer loads.
func (n *Node) Plan(all []*installed.Plugin) ([]*Plugin, []api.Finding) {
	return n.PlanLearned(all, Learned{})
}

// PlanLearned is Plan with what the running node has learned.
func (n *Node) PlanLearned(all []*installed.Plugin, l Learned) ([]*Plugin, []api.Finding) {
	var out []*Plugin
	var findings []api.Finding
	collide := collisions(all)
	n.mu.Lock()
	n.collide = collide
	n.mu.Unlock()
	n.mu.Lock()
	for _, in := range all {
		// The listing is fresh: a commit built again (`plugin update`) replaces
		// the record calls read.
		if n.records != nil {
			n.records[in.Name+"@"+in.Commit] = in
		}
	}
	n.mu.Unlock()
	for _, in := range all {
		p, err := n.plan(in, collide[in.Name], l)
		if errors.Is(err, ErrValuesUnreadable) {
			findings = append(findings, api.Finding{
				Code: api.CodeRecordUnreadable, Severity: api.SevError, Subject: in.Name,
				Message: err.Error() + "; the plugin is held back",
				Fix:     fmt.Sprintf("fix or remove %s (oz0-node plugin config %s KEY=VALUE writes it anew)", userconf.File(n.Dir, in.Name), in.Name),
			})
			continue
		}
		if err != nil {
			findings = append(findings, api.Finding{
				Code: api.CodeManifestInvalid, Severity: api.SevError, Subject: in.Name,
				Message: err.Error(), Fix: "reinstall a commit whose manifest passes oz0-node plugin lint",
			})
			continue
		}
		out = append(out, p)
		findings = append(findings, p.Decision.Findings...)
	}
	for _, e := range n.Config.Exemptions {
		found := false
		for _, in := range all {
			if in.Name == e.Name {
				found = true
			}
		}
		if !found {
			findings = append(findings, api.Finding{
				Code: api.CodeExemptionUnmatched, Severity: api.SevWarning, Subject: e.String(),
				Message: fmt.Sprintf("--plugin-sandbox-exempt %s names no installed plugin; it will cover whatever is installed under %s next", e, e.Name),
				Fix:     "remove the flag if it is stale",
			})
		}
	}
	return out, findings
}

// ErrValuesUnreadable marks a plugin whose operator values file cannot be read
// (node/userconf): it is held back rather than started without them.
var ErrValuesUnreadable = errors.New("the operator's values for the plugin cannot be read")

// One plans a single installed plugin now: its active commit is read again and the
// policy decides again. Uid collisions come from the last Plan when there was one
// (every install and removal triggers one in a running node), else from a fresh
// listing.
func (n *Node) One(name string) (*Plugin, error) { return n.OneLearned(name, Learned{}) }

// OneLearned is One with what the running node has learned.
func (n *Node) OneLearned(name string, l Learned) (*Plugin, error) {
	commit, err := installed.Current(n.Dir, name)
	if err != nil {
		return nil, err
	}
	in, err := n.record(name, commit)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	collide := n.collide
	n.mu.Unlock()
	if collide == nil {
		all, _ := installed.List(n.Dir)
		collide = collisions(all)
	}
	return n.plan(in, collide[name], l)
}

// record reads an installed commit's install record once; like its files, the
// record of a commit does not change after it is activated, except by an update
// that builds the same commit again, which Plan (run on every change of the
// plugins folder) picks up.
func (n *Node) record(name, commit string) (*installed.Plugin, error) {
	key := name + "@" + commit
	n.mu.Lock()
	in, ok := n.records[key]
	n.mu.Unlock()
	if ok {
		return in, nil
	}
	in, err := installed.LookupCommit(n.Dir, name, commit)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.records == nil {
		n.records = map[string]*installed.Plugin{}
	}
	n.records[key] = in
	n.mu.Unlock()
	return in, nil
}

// load parses an installed commit's manifest once.
func (n *Node) load(in *installed.Plugin) (*manifest.Manifest, error) {
	key := in.Dir + "\x00" + fmt.Sprint(in.FirstParty)
	n.mu.Lock()
	m, ok := n.manifests[key]
	n.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := manifest.Load(in.Dir, manifest.Options{FirstParty: in.FirstParty})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.manifests == nil {
		n.manifests = map[string]*manifest.Manifest{}
	}
	n.manifests[key] = m
	n.mu.Unlock()
	return m, nil
}

// collisions maps a plugin name to who already has its uid: an earlier-installed
// plugin, the sandbox probe, or an account or group of the system (a plugin running
// as an existing user could read its files and signal its processes; with an
// existing gid it would get that group's access).
func collisions(all []*installed.Plugin) map[string]string {
	sorted := append([]*installed.Plugin(nil), all...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].InstalledAt.Equal(sorted[j].InstalledAt) {
			return sorted[i].InstalledAt.Before(sorted[j].InstalledAt)
		}
		return sorted[i].Name < sorted[j].Name
	})
	first := map[uint32]string{}
	out := map[string]string{}
	for _, in := range sorted {
		uid := policy.PluginUID(in.Name)
		if owner, ok := first[uid]; ok {
			out[in.Name] = "plugin " + owner
			continue
		}
		first[uid] = in.Name
		if who := systemIDOwner(uid); who != "" {
			out[in.Name] = who
		}
	}
	return out
}

// systemIDOwner says who besides plugins has id as a uid or gid: the sandbox probe,
// or an account or group the password or group database knows (files, or NSS where
// the binary uses it).
func systemIDOwner(id uint32) string {
	if id == policy.PluginUID(policy.ProbeUser) {
		return "the node's sandbox probe (" + policy.ProbeUser + ")"
	}
	s := strconv.FormatUint(uint64(id), 10)
	if u, err := user.LookupId(s); err == nil {
		return fmt.Sprintf("account %s of this system (password database)", u.Username)
	}
	if g, err := user.LookupGroupId(s); err == nil {
		return fmt.Sprintf("group %s of this system (group database)", g.Name)
	}
	return ""
}

func (n *Node) plan(in *installed.Plugin, collision string, l Learned) (*Plugin, error) {
	m, err := n.load(in)
	if err != nil {
		return nil, fmt.Errorf("plugin %s@%s: manifest: %w", in.Name, in.Commit, err)
	}
	if m.Name != in.Name {
		return nil, fmt.Errorf("plugin %s@%s: manifest names %q", in.Name, in.Commit, m.Name)
	}
	home := n.Dir.Home(in.Name)
	// Values are the operator's, read now (a change applies on the next start);
	// the node's own environment is never consulted.
	cfg, err := userconf.LoadConfig(n.Dir, in.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValuesUnreadable, err)
	}
	vals := cfg.Values
	root := in.Dir
	if sandbox.NoMountNamespace(n.OS, n.Backend) {
		// No mount namespace to show the view at the commit's path: the plugin's
		// paths are its view's (View).
		root = n.Dir.View(in.Name, in.Commit)
	}
	vars := manifest.Vars{Root: root, Data: home}
	exp, unresolved := m.ExpandAll(vars, vals.Lookup)
	var secrets []string
	for _, k := range vals.Keys() {
		if v := vals[k]; v != "" && !userconf.Public(m, k) && !slices.Contains(secrets, v) {
			secrets = append(secrets, v)
		}
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	// A declared option that is neither required nor set expands to nothing, as in
	// Claude Code; only a required one, or a bare ${VAR} without a default, holds a
	// server back.
	unresolved = slices.DeleteFunc(unresolved, func(u manifest.Unresolved) bool { return !m.HoldsBack(u) })
	unresolved = append(unresolved, remoteEgress(exp, unresolved)...)
	var tenant *netrule.TenantList
	if n.Tenant != nil {
		tenant = n.Tenant()
	}
	d := policy.Decide(policy.Inputs{
		Manifest:           exp,
		Commit:             in.Commit,
		Mode:               n.Config.Mode,
		OS:                 n.OS,
		Tier:               n.Tier,
		Backend:            n.Backend,
		GVisor:             n.GVisor,
		PluginBackend:      n.Config.PluginBackends[in.Name],
		Exemptions:         n.Config.Exemptions,
		Private:            in.Private,
		Root:               n.Root,
		DataDirTraversable: n.Traversable,
		UserUnreachable:    l.UserUnreachable[in.Name],
		UIDCollision:       collision,
		Unresolved:         unresolved,
		Tenant:             tenant,
		Missing:            missingPrograms(exp, in, n.OS),
	})
	// What the tools hold is decided now: a secret becomes a sentinel where a
	// sandboxed tool uses it (docs/promises.md §17).
	run, shown, uses := withSecrets(m, in.Name, vars, cfg, &d)
	for _, x := range []*manifest.Manifest{run, shown} {
		x.Egress = exp.Egress
		for i := range x.Servers {
			if s := exp.Server(x.Servers[i].Name); s != nil {
				x.Servers[i].Egress = s.Egress
			}
		}
	}
	bindings, findings := secretBindings(in.Name, m, run, cfg, uses)
	d.Findings = append(d.Findings, findings...)
	return &Plugin{Installed: in, Manifest: run, Decision: d, Unresolved: unresolved, shown: shown, secrets: secrets,
		secretRules: secretRules(m, cfg, uses), bindings: bindings, node: n}, nil
}

// missingPrograms are the local servers of m whose program (a bare name: bun,
// deno, php…) is on no folder of the PATH they run with, looked up now: a
// runtime installed later is found at the next decision. A server started
// through a launcher runs the managed runtime install resolved for it.
func missingPrograms(m *manifest.Manifest, in *installed.Plugin, goos string) map[string]policy.MissingProgram {
	var out map[string]policy.MissingProgram
	for _, s := range m.Servers {
		if s.IsRemote() || in.Launch(s.Name) != nil {
			continue
		}
		if path, ok := sandbox.FindProgram(goos, s.Command, s.Env); !ok {
			if out == nil {
				out = map[string]policy.MissingProgram{}
			}
			out[s.Name] = policy.MissingProgram{Program: s.Command, Path: path}
		}
	}
	return out
}

// remoteEgress makes each remote server's URL host its egress entry: added to
// the plugin's list (the URL counts as the manifest's entry) and, as the server's
// own list, narrowing what its connections may reach to that host and port. A
// host no list may name (loopback, a private address) is refused here.
func remoteEgress(m *manifest.Manifest, unresolved []manifest.Unresolved) []manifest.Unresolved {
	var out []manifest.Unresolved
	m.Egress = slices.Clone(m.Egress)
	for i := range m.Servers {
		s := &m.Servers[i]
		if !s.IsRemote() || slices.ContainsFunc(unresolved, func(u manifest.Unresolved) bool { return u.Hook < 0 && u.Server == s.Name }) {
			continue
		}
		host, port, err := policy.RemoteHostPort(s.Remote.URL)
		if err == nil {
			_, err = netrule.ParsePattern(host)
		}
		if err != nil {
			out = append(out, manifest.Unresolved{Server: s.Name, Hook: -1, Field: "url",
				Problem: fmt.Sprintf("the URL's host cannot be reached through the egress proxy: %v", err)})
			continue
		}
		e := manifest.EgressEntry{Host: host, Ports: []int{port}, Reason: "remote MCP server " + s.DisplayName()}
		m.Egress = append(m.Egress, e)
		s.Egress = []manifest.EgressEntry{e}
	}
	return out
}

// others are the other installed plugins' folders and homes, which the sandbox
// must keep out of reach (Seatbelt denies them by name). Listed at spec time only.
func (p *Plugin) others() []string {
	var out []string
	ents, _ := os.ReadDir(p.node.Dir.Plugins())
	for _, e := range ents {
		if e.IsDir() && e.Name() != p.Installed.Name && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, p.node.Dir.Plugin(e.Name()), p.node.Dir.Home(e.Name()), p.node.Dir.HookHome(e.Name()))
		}
	}
	return out
}

// View is the writable view of the plugin's installed commit its sandboxes see
// (datadir.View): for the runs of its hooks that receive the agent's data
// (isolated) one of their own, kept apart from the view its servers share —
// except under Seatbelt and Landlock, which have no mount namespace to show a view
// at the commit's path: there every run's paths are the one view's, and such hook
// runs see it read-only.
func (p *Plugin) View(isolated bool) string {
	d, name, commit := p.node.Dir, p.Installed.Name, p.Installed.Commit
	if isolated && !sandbox.NoMountNamespace(p.node.OS, p.node.Backend) {
		return d.HookView(name, commit)
	}
	return d.View(name, commit)
}

// EnsureView makes the view spec binds (its PluginView) when there is none yet:
// a copy of the installed commit, owned by the plugin's user (view.Ensure).
func (p *Plugin) EnsureView(spec *sandbox.Spec) error {
	for _, m := range spec.Mounts {
		if m.Source != p.View(false) && m.Source != p.View(true) {
			continue
		}
		u := p.Decision.User
		mode := os.FileMode(datadir.ModeUserNode)
		if p.node.Root {
			mode = datadir.ModeRootNode // plugin users pass through to their own views
		}
		if err := os.MkdirAll(p.node.Dir.Views(), mode); err != nil {
			return fmt.Errorf("plugin %s: views: %w", p.Installed.Name, err)
		}
		if _, err := view.Ensure(p.Installed.Dir, m.Source, view.Owner{UID: int(u.UID), GID: int(u.GID), Chown: u.PerPlugin}); err != nil {
			return fmt.Errorf("plugin %s: %w", p.Installed.Name, err)
		}
		if err := p.handOver(filepath.Dir(m.Source)); err != nil {
			return err
		}
	}
	return nil
}

// OS is the node's OS the plugin was planned for (linux or darwin).
func (p *Plugin) OS() string { return p.node.OS }

// Home is the plugin's persistent home.
func (p *Plugin) Home() string { return p.node.Dir.Home(p.Installed.Name) }

// Endpoints are the egress endpoints the node opens for the plugin now: its own
// and one per server, each a socket and, where its sandboxes reach the proxy on
// the host's loopback (sandbox.HostPort), a port. A port is opened only where one
// is the only way in.
func (p *Plugin) Endpoints() []sandbox.Endpoint {
	os := p.node.OS
	var gid uint32
	if p.Decision.User.PerPlugin {
		gid = p.Decision.User.GID
	}
	own := sandbox.Endpoint{GID: gid}
	for _, t := range p.Decision.Hooks {
		own.HostPort = own.HostPort || (t.Action == policy.Sandboxed && sandbox.HostPort(os, t.Backend, t.Network))
	}
	out := []sandbox.Endpoint{own}
	for _, s := range p.Manifest.Servers {
		t, _ := p.Decision.Server(s.Name)
		out = append(out, sandbox.Endpoint{Server: s.Name, GID: gid, HostPort: t.Action == policy.Sandboxed && sandbox.HostPort(os, t.Backend, t.Network)})
	}
	return out
}

// host is the node's side of a start whose egress goes through the endpoint of
// server ("" for the plugin's own).
func (p *Plugin) host(server string, px Proxy) sandbox.Host {
	n := p.node
	h := sandbox.Host{
		OS:            n.OS,
		DataDir:       n.Dir.Root,
		KeyFile:       n.Dir.Key(),
		PluginDir:     p.Installed.Dir,
		PluginView:    p.View(false),
		PathsAreViews: sandbox.NoMountNamespace(n.OS, n.Backend),
		Home:          p.Home(),
		Others:        p.others(),
		Runtimes:      n.Runtimes,
		NodeBinary:    n.NodeBinary,
		Defaults:      n.Limits,
		TrustD:        slices.Contains(n.Config.TrustD, p.Installed.Name),
		ReadOnly:      n.Config.ROPaths[p.Installed.Name],
		CABundle:      p.caBundle(),
	}
	if h.CABundle != "" {
		h.SystemCABundles = systemCABundles()
	}
	if px.Sockets {
		h.ProxySocketDir = n.Dir.EgressSocketDir(p.Installed.Name)
		if server != "" {
			h.ProxySocketDir = n.Dir.EgressServerSocketDir(p.Installed.Name, server)
		}
	}
	h.ProxyPort, h.ProxyCredential = px.Port, px.Credential
	return h
}

// ServerSpec is the sandbox of one server started with its egress endpoint px, or
// an error saying why it does not start.
func (p *Plugin) ServerSpec(server string, px Proxy) (*sandbox.Spec, policy.Target, error) {
	s := p.Manifest.Server(server)
	if s == nil {
		return nil, policy.Target{}, fmt.Errorf("plugin %s has no server %q", p.Installed.Name, server)
	}
	t, _ := p.Decision.Server(server)
	if s.Remote != nil {
		// No plugin code runs for a remote server: the gateway connects to it.
		return nil, t, fmt.Errorf("server %s of plugin %s is remote (%s): it has no sandbox", server, p.Installed.Name, s.Remote.Type)
	}
	argv, err := p.serverArgv(s)
	if err != nil {
		return nil, t, err
	}
	spec, err := sandbox.Build(&p.Decision, t, p.Manifest, "server", argv, s.Cwd, s.Env, p.host(server, px), s.Limits)
	return spec, t, err
}

// serverArgv is the server's command line: as the manifest says, or, for a server
// started through a launcher (npx, uvx…), the entry point install resolved for it,
// run by the node's managed runtime, so the start fetches nothing.
func (p *Plugin) serverArgv(s *manifest.Server) ([]string, error) {
	l := p.Installed.Launch(s.Name)
	if l == nil {
		return append([]string{s.Command}, s.Args...), nil
	}
	rs, err := installed.LoadRuntimes(p.node.Dir)
	if err != nil {
		return nil, err
	}
	return l.Argv(p.Installed.Dir, rs, s.Args)
}

// HookTarget is the decision for one run of hook i (in manifest order) for an
// event about a tool that plugin owner serves (hookrun.Served; "" for the agent's
// own tools and events without a tool): the hook's decision, with no network when
// the event carries the agent's data and the operator did not grant the plugin's
// hooks egress (policy.HookRun).
func (p *Plugin) HookTarget(i int, owner string) (policy.Target, error) {
	if i < 0 || i >= len(p.Manifest.Hooks) {
		return policy.Target{}, fmt.Errorf("plugin %s has no hook %d", p.Installed.Name, i)
	}
	return policy.HookRun(p.Decision.Hooks[i], p.node.Config.HookEgress, p.Installed.Name, owner), nil
}

// HookSpec is the sandbox of one run of hook i (in manifest order) for an event
// about a tool of owner (HookTarget), started with the plugin's own egress
// endpoint px where the run has a network; the hook's command runs through
// /bin/sh -c, or as program and args in the exec form (Hook.Argv).
func (p *Plugin) HookSpec(i int, owner string, px Proxy) (*sandbox.Spec, policy.Target, error) {
	t, err := p.HookTarget(i, owner)
	if err != nil {
		return nil, t, err
	}
	h := p.host("", px)
	if t.Network == policy.NetIsolated {
		// Nothing to connect to: no socket, no port, no proxy variables; and a home
		// of its own, so that nothing of the plugin with a network — its servers,
		// its hooks on its own tools — reads what the agent's data left there.
		h = p.host("", Proxy{})
		h.HookHome = p.node.Dir.HookHome(p.Installed.Name)
		h.PluginView = p.View(true)
		h.PluginViewReadOnly = sandbox.NoMountNamespace(p.node.OS, p.node.Backend) // its paths are the view's (see View)
	}
	argv := p.Manifest.Hooks[i].Argv()
	spec, err := sandbox.Build(&p.Decision, t, p.Manifest, "hook", argv, "", nil, h, manifest.Limits{})
	return spec, t, err
}

// ExecServer is the server whose sandbox (and egress endpoint) `oz0-node exec`
// takes: the named one, else the plugin's first, else "" (its hooks').
func (p *Plugin) ExecServer(server string) string {
	if server == "" {
		if s := p.firstLocal(); s != nil {
			return s.Name
		}
	}
	return server
}

// firstLocal is the plugin's first server that runs plugin code (not remote).
func (p *Plugin) firstLocal() *manifest.Server {
	for i := range p.Manifest.Servers {
		if !p.Manifest.Servers[i].IsRemote() {
			return &p.Manifest.Servers[i]
		}
	}
	return nil
}

// ExecTarget is the decision `oz0-node exec` runs under: the named server's, or the
// plugin's first server's (or first hook's, for a plugin without servers) when
// server is "". Its network says whether exec must give the sandbox an egress
// endpoint before it builds the spec.
func (p *Plugin) ExecTarget(server string) (policy.Target, error) {
	t, _, err := p.execFrom(server)
	return t, err
}

// execFrom is the target exec takes and the server it takes it from (nil: a hook).
func (p *Plugin) execFrom(server string) (policy.Target, *manifest.Server, error) {
	var t policy.Target
	switch {
	case server != "":
		s := p.Manifest.Server(server)
		if s == nil {
			return t, nil, fmt.Errorf("plugin %s has no server %q", p.Installed.Name, server)
		}
		if s.IsRemote() {
			return t, nil, fmt.Errorf("server %s of plugin %s is remote: no plugin code runs for it, so it has no sandbox to run a command in", server, p.Installed.Name)
		}
		t, _ = p.Decision.Server(server)
		return t, s, nil
	case p.firstLocal() != nil:
		s := p.firstLocal()
		t, _ = p.Decision.Server(s.Name)
		return t, s, nil
	case len(p.Decision.Hooks) > 0:
		return p.Decision.Hooks[0], nil, nil
	}
	return t, nil, fmt.Errorf("plugin %s has no servers or hooks to take a sandbox from", p.Installed.Name)
}

// ExecSpec is the sandbox `oz0-node exec` runs argv in, with the egress endpoint
// px: exactly the sandbox of the server ExecTarget names (its user, mounts,
// limits, network, environment and endpoint).
func (p *Plugin) ExecSpec(server string, argv []string, px Proxy) (*sandbox.Spec, policy.Target, error) {
	t, s, err := p.execFrom(server)
	if err != nil {
		return nil, t, err
	}
	var env map[string]string
	var cwd string
	var lim manifest.Limits
	if s != nil {
		env, cwd, lim = s.Env, s.Cwd, s.Limits
	}
	spec, err := sandbox.Build(&p.Decision, t, p.Manifest, "exec", argv, cwd, env, p.host(p.ExecServer(server), px), lim)
	if err != nil {
		return nil, t, err
	}
	if server != "" {
		spec.Server = server
	}
	return spec, t, nil
}

// EnsureHome creates the plugin's home (0700) directly under the data folder's
// homes/, owned by the plugin's user when it has one. A home that is a link (which
// a plugin running as the node's user could have put there) is refused: the node
// never follows it, and nothing starts.
func (p *Plugin) EnsureHome() error {
	mode := os.FileMode(datadir.ModeUserNode)
	if p.node.Root {
		mode = datadir.ModeRootNode
	}
	u := p.Decision.User
	names := []string{p.Installed.Name}
	if len(p.Manifest.Hooks) > 0 {
		names = append(names, p.Installed.Name+datadir.HookHomeSuffix)
	}
	for _, name := range names {
		// Where the node hands folders over, the whole tree changes hands below.
		home, err := p.node.Dir.EnsureHome(name, mode, int(u.UID), int(u.GID), u.PerPlugin && !p.handsOver())
		if err != nil {
			return fmt.Errorf("plugin %s: %w", p.Installed.Name, err)
		}
		if err := p.handOver(home); err != nil {
			return err
		}
	}
	return nil
}

// handsOver says whether the node hands the plugin's folders to the user it runs
// as: on a Linux node running as root, where that user may change.
func (p *Plugin) handsOver() bool {
	return p.node.Root && runtime.GOOS == "linux" && os.Geteuid() == 0
}

// handOver makes a writable folder of the plugin (a home, its views) belong to
// the user its sandboxes run as now, on a root node: the plugin's own user, or
// the node's when its own cannot reach its folders. What the plugin wrote as one
// stays its own as the other (datadir.HandOver).
func (p *Plugin) handOver(dir string) error {
	if !p.handsOver() {
		return nil
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if u := p.Decision.User; u.PerPlugin {
		uid, gid = int(u.UID), int(u.GID)
	}
	changed, err := datadir.HandOver(dir, uid, gid)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", p.Installed.Name, err)
	}
	if changed {
		slog.Info("plugin folder handed over to the user its sandboxes run as", "plugin", p.Installed.Name, "folder", dir, "uid", uid)
	}
	return nil
}

// TenantFile reads the tenant's egress list from its file each time, as the proxy
// does: a missing file allows nothing, one that cannot be parsed allows nothing.
func TenantFile(path string) func() *netrule.TenantList {
	return func() *netrule.TenantList {
		tl, _ := datadir.ReadTenantList(path)
		return tl
	}
}

// New builds the node's facts once, from its data folder, its run configuration,
// the probe's verdict (or one assumed for a preview) and the managed runtimes
// plugins read. A verdict without an OS is this machine's.
func New(d datadir.Dir, cfg config.Run, v probe.Verdict, runtimes []string) *Node {
	ok, blocker := datadir.TraversableByOthers(d.Root)
	self, _ := os.Executable()
	if self != "" {
		if r, err := filepath.EvalSymlinks(self); err == nil {
			self = r
		}
	}
	return &Node{
		Dir: d, Config: cfg, OS: cmp.Or(v.OS, runtime.GOOS), Root: os.Geteuid() == 0, Tenant: TenantFile(d.TenantList()),
		Tier: v.Tier, Backend: v.Backend, GVisor: v.GVisor, Runtimes: runtimes,
		NodeBinary: self, Traversable: ok, Blocker: blocker,
		Limits: sandbox.DefaultLimits,
	}
}

// Findings are what the node says of itself at start besides its probe: plugin
// users off on a tier-1 node (and why), a mode that leaves plugins unsandboxed or
// on the host's network.
func (n *Node) Findings() []api.Finding {
	var out []api.Finding
	if n.Tier == 1 {
		if _, f := pluginuser.Available(n.Dir); f != nil {
			out = append(out, *f)
		}
	}
	if n.Config.Mode == policy.Off {
		out = append(out, api.Finding{Code: api.CodeModeOff, Severity: api.SevWarning, Subject: "node",
			Message: "--plugin-sandbox off: plugins other than private candidates run unsandboxed as the node's user", Fix: "run with --plugin-sandbox strict"})
	}
	if n.Config.Mode == policy.Auto && n.OS == "linux" {
		out = append(out, api.Finding{Code: api.CodeModeAutoHostNet, Severity: api.SevInfo, Subject: "node",
			Message: "--plugin-sandbox auto: sandboxes keep the host network; only the plugin's own code honours the proxy", Fix: "run with --plugin-sandbox strict"})
	}
	return out
}
