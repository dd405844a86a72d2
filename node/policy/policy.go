// Package policy decides, for one plugin on one node, whether each server and hook
// runs sandboxed, unsandboxed as the node's user, or not at all — and as which user,
// on which network, and why. It is a pure function of its inputs (docs/promises.md §2–§8)
// and is called again on every start and every call; nothing is cached from install.
package policy

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/netrule"
)

// Mode is the node's --plugin-sandbox mode.
type Mode string

const (
	Strict Mode = "strict"
	Auto   Mode = "auto"
	Off    Mode = "off"
)

// ParseMode validates a --plugin-sandbox value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Strict, Auto, Off:
		return Mode(s), nil
	}
	return "", fmt.Errorf("--plugin-sandbox %q: must be strict, auto or off", s)
}

// Backend names.
const (
	BackendBwrap    = "bwrap"
	BackendGVisor   = "gvisor"
	BackendSeatbelt = "seatbelt"
	// BackendLandlock confines with Landlock and seccomp, without namespaces:
	// the Linux tier where user namespaces are refused (docs/promises.md §2).
	BackendLandlock = "landlock"
	BackendNone     = "none"
)

// Inputs are everything the decision depends on.
type Inputs struct {
	Manifest *manifest.Manifest
	Commit   string
	Mode     Mode
	OS       string // "linux" or "darwin"
	// Tier is 1 when a sandbox backend works, 0 when none does.
	Tier int
	// Backend is the node's working default backend (bwrap, gvisor, landlock, seatbelt; none at tier 0).
	Backend string
	// GVisor reports whether gVisor works on this node (for plugins that require it).
	GVisor bool
	// PluginBackend is the operator's --plugin-backend choice for this plugin ("" or gvisor).
	PluginBackend string
	Exemptions    []Exemption
	// Private marks a private candidate (installed from a folder or with --private).
	Private bool
	// Root is true when the node runs as uid 0.
	Root bool
	// DataDirTraversable is false when the data folder lies under a folder other
	// users cannot traverse (e.g. /root), which turns per-plugin users off.
	DataDirTraversable bool
	// UserUnreachable, when set, says why the plugin's folders are out of its user's
	// reach; its servers then run as the node's user.
	UserUnreachable string
	// UIDCollision names who already has the uid (or gid) this plugin's name hashes
	// to: "plugin NAME", an account or group of the system, or the sandbox probe.
	UIDCollision string
	// Unresolved are the references the operator's values left without one (or
	// whose value is refused): the server or hook they belong to does not start.
	Unresolved []manifest.Unresolved
	// Tenant is the tenant's egress list as it stands now, which a remote server's
	// host must be on; nil when unknown (the proxy still decides every connection).
	Tenant *netrule.TenantList
	// Missing are the local servers whose program this node lacks now (a runtime
	// such as bun, deno or php that is not installed), by server name: they are
	// held back with that reason rather than started into a crash loop.
	Missing map[string]MissingProgram
}

// MissingProgram is a program a server starts that is on no folder of the PATH
// it runs with.
type MissingProgram struct {
	Program string
	Path    string // the PATH it was looked for on
}

// Action is what happens to a server or hook.
type Action string

const (
	Sandboxed   Action = "sandboxed"
	Unsandboxed Action = "unsandboxed"
	Refused     Action = "refused"
	// Remote: no plugin code runs; the node connects to the server itself, through
	// its egress proxy.
	Remote Action = "remote"
)

// Network a started process gets.
type Network string

const (
	// NetProxy: its own network namespace; only the node's egress proxy is reachable.
	NetProxy Network = "proxy"
	// NetHostProxyVars: the host network, with proxy variables set (auto mode).
	NetHostProxyVars Network = "host+proxy-vars"
	// NetHost: the host network with nothing in the way (unsandboxed).
	NetHost Network = "host"
	// NetNone: not started.
	NetNone Network = "none"
	// NetIsolated: a network namespace of its own with nothing to connect to — no
	// proxy, no proxy variables. A hook that receives the agent's data runs so
	// (docs/promises.md §16).
	NetIsolated Network = "isolated"
)

// User is who a process runs as.
type User struct {
	PerPlugin bool   `json:"per_plugin"`
	UID       uint32 `json:"uid"`
	GID       uint32 `json:"gid"`
	// Why explains a node-user choice (or names the per-plugin user).
	Why string `json:"why"`
}

func (u User) String() string {
	if u.PerPlugin {
		return fmt.Sprintf("uid %d (plugin user)", u.UID)
	}
	return "node user"
}

// Target is the decision for one server or hook.
type Target struct {
	Kind    string               `json:"kind"` // "server" or "hook"
	Name    string               `json:"name"` // server name or "Event[i]"
	Declare manifest.SandboxKind `json:"declared"`
	Action  Action               `json:"action"`
	Exempt  bool                 `json:"exempt"`
	Backend string               `json:"backend"` // bwrap, gvisor, landlock, seatbelt, none
	Network Network              `json:"network"`
	User    User                 `json:"user"`
	Reasons []string             `json:"reasons"`
	// Timeout is, for a hook, how long it may run: its manifest's timeout, at most
	// HookTimeoutCap.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Refusal returns the text a refused call answers with.
func (t Target) Refusal() string {
	return strings.Join(t.Reasons, "; ")
}

// Build is the decision for a plugin's build step (docs/promises.md §6).
type Build struct {
	// PackageCode is true when the build may run package code (build backends,
	// setup.py, npm lifecycle scripts). It then runs as the node's user.
	PackageCode bool   `json:"package_code"`
	Reason      string `json:"reason"`
}

// Decision is the policy's answer for one plugin.
type Decision struct {
	Plugin   string        `json:"plugin"`
	Commit   string        `json:"commit"`
	Refused  string        `json:"refused,omitempty"` // why the whole plugin is refused
	Exempt   bool          `json:"exempt"`
	Backend  string        `json:"backend"`
	User     User          `json:"user"`
	Servers  []Target      `json:"servers"`
	Hooks    []Target      `json:"hooks"`
	Build    Build         `json:"build"`
	Findings []api.Finding `json:"findings"`
}

// Server returns the decision for a named server.
func (d *Decision) Server(name string) (Target, bool) {
	for _, t := range d.Servers {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}

// UID base and span for per-plugin users: uid = UIDBase + fnv1a32(name) mod UIDSpan.
// The span keeps every uid below 2^31 (some tools treat larger ids as negative).
const (
	UIDBase = 1_900_000_000
	UIDSpan = 200_000_000
)

// ProbeUser is the name whose uid the backend probe's sandbox runs as, so the probe
// takes the same uid switch as every plugin; no plugin may share that uid.
const ProbeUser = "oz0-probe"

// PluginUID is the per-plugin uid and gid of a plugin name on a root node:
// 1_900_000_000 + (FNV-1a 32-bit hash of the name, modulo 200_000_000).
func PluginUID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return UIDBase + h.Sum32()%UIDSpan
}

// Decide computes the decision. It never fails: invalid combinations become
// refusals with reasons.
func Decide(in Inputs) Decision {
	dc := &decider{in: in, m: in.Manifest}
	dc.d = Decision{Plugin: dc.m.Name, Commit: in.Commit}
	dc.exemption()
	dc.backend()
	dc.stance()
	dc.user()
	for _, s := range dc.m.Servers {
		dc.d.Servers = append(dc.d.Servers, dc.server(s))
	}
	for i, h := range dc.m.Hooks {
		dc.d.Hooks = append(dc.d.Hooks, dc.hook(i, h))
	}
	if dc.sandboxed && dc.refuseAll == "" && in.OS == "darwin" {
		dc.finding(api.CodeSeatbeltNoLimits, api.SevInfo, dc.m.Name, "Seatbelt holds no memory, process or CPU limits and no per-plugin user", "")
	}
	dc.d.Build = dc.build()
	return dc.d
}

// decider holds one Decide's inputs and what its phases have decided so far:
// exemption, then backend, then the plugin-wide stance, then the user, then each
// server and hook, then the build.
type decider struct {
	in Inputs
	m  *manifest.Manifest
	d  Decision

	exempt  bool   // an exemption of the operator's applies
	matched string // the exemption that matched, as the operator wrote it

	wantGVisor bool // the manifest or the operator raised the plugin to gVisor
	gvisorOK   bool // and this node has it

	// refuseAll says why every target is refused ("" when not); sandboxed is
	// whether targets of kind "default" run sandboxed, on network, for why.
	refuseAll string
	sandboxed bool
	network   Network
	why       []string
}

func (dc *decider) finding(code string, sev api.Severity, subject, msg, fix string) {
	dc.d.Findings = append(dc.d.Findings, api.Finding{Code: code, Severity: sev, Subject: subject, Message: msg, Fix: fix})
}

// exemption applies the operator's exemptions: theirs alone, never for a
// private candidate.
func (dc *decider) exemption() {
	in, m := dc.in, dc.m
	ex := MatchExemptions(in.Exemptions, m.Name, in.Commit)
	for _, e := range ex.Mismatched {
		dc.finding(api.CodeExemptionCommit, api.SevWarning, m.Name,
			fmt.Sprintf("exemption %s does not match installed commit %s, so %s stays sandboxed", e, short(in.Commit), m.Name),
			fmt.Sprintf("use --plugin-sandbox-exempt %s@%s to exempt the installed version", m.Name, in.Commit))
	}
	dc.matched = ex.Matched
	dc.exempt = ex.Matched != ""
	if dc.exempt && in.Private {
		dc.finding(api.CodeExemptionPrivate, api.SevWarning, m.Name,
			fmt.Sprintf("exemption %s ignored: %s is a private candidate, which is always sandboxed", ex.Matched, m.Name),
			"install the plugin from its repository (not --private, not a plain folder) to make it exemptable")
		dc.exempt = false
	}
	dc.d.Exempt = dc.exempt
}

// backend is the node's, raised to gVisor when the manifest or the operator asks.
func (dc *decider) backend() {
	in := dc.in
	dc.wantGVisor = dc.m.Isolation == manifest.IsolationGVisor || in.PluginBackend == BackendGVisor
	// gVisor is there only on a Linux node at tier 1 that found a working runsc.
	dc.gvisorOK = in.GVisor && in.OS == "linux" && in.Tier > 0
	dc.d.Backend = in.Backend
	if in.Tier == 0 {
		dc.d.Backend = BackendNone
	}
	if dc.wantGVisor {
		dc.d.Backend = BackendGVisor
	}
}

// stance decides for the whole plugin: refused, sandboxed (on which network) or
// unsandboxed, and why.
func (dc *decider) stance() {
	in, m := dc.in, dc.m
	dc.network = NetProxy
	switch {
	case in.UIDCollision != "" && in.Root && in.OS == "linux":
		dc.refuseAll = fmt.Sprintf("plugin %s hashes to uid %d, already used by %s; users are never shared", m.Name, PluginUID(m.Name), in.UIDCollision)
		dc.finding(api.CodeUIDCollision, api.SevError, m.Name, dc.refuseAll, "remove one of the two plugins, have one renamed in its manifest, or move the account or group off that id: the name decides the uid, and users are never shared")
	case dc.exempt:
		dc.why = append(dc.why, fmt.Sprintf("exempt by the operator (--plugin-sandbox-exempt %s): runs unsandboxed as the node's user", dc.matched))
		dc.finding(api.CodeExemptRunning, api.SevWarning, m.Name,
			fmt.Sprintf("%s is exempt (--plugin-sandbox-exempt %s) and runs unsandboxed as the node's user", m.Name, dc.matched),
			"remove the exemption to sandbox it again")
	case dc.wantGVisor && !dc.gvisorOK:
		who := "its manifest (isolation: gvisor)"
		if in.PluginBackend == BackendGVisor {
			who = "the operator (--plugin-backend " + m.Name + "=gvisor)"
		}
		dc.refuseAll = fmt.Sprintf("%s requires gVisor, asked by %s, and gVisor is not available on this node; it is refused, never run on a weaker tier", m.Name, who)
		dc.finding(api.CodeGVisorRequired, api.SevError, m.Name, dc.refuseAll, "install a current runsc (docs/operators.md, Install) or run the plugin on a node with gVisor")
	case in.Tier == 0 && in.Private:
		dc.refuseAll = fmt.Sprintf("%s is a private candidate, which always runs sandboxed, and this node has no working sandbox backend (tier 0)", m.Name)
		dc.finding(api.CodePluginRefused, api.SevError, m.Name, dc.refuseAll, "install bubblewrap or runsc (Linux) so that the node reaches tier 1")
	case in.Tier == 0:
		dc.why = append(dc.why, "tier 0: no sandbox backend works on this node, so every plugin runs as the node's user with no plugin sandbox")
	case in.Private:
		dc.sandboxed = true
		dc.why = append(dc.why, "private candidate: always sandboxed, with egress only through the proxy")
	case in.Mode == Off && dc.wantGVisor:
		// Never downgraded: a plugin that must run in gVisor runs there or not at all.
		dc.sandboxed = true
		who := "its manifest requires gVisor (isolation: gvisor)"
		if in.PluginBackend == BackendGVisor {
			who = "--plugin-backend " + m.Name + "=gvisor"
		}
		dc.why = append(dc.why, who+": sandboxed in gVisor although the mode is off")
	case in.Mode == Off:
		dc.why = append(dc.why, "--plugin-sandbox off: runs unsandboxed as the node's user")
	case in.Mode == Auto && in.OS == "darwin":
		dc.why = append(dc.why, "--plugin-sandbox auto on macOS: Seatbelt has no host network to share, so the plugin runs unsandboxed as the node's user")
		dc.finding(api.CodeMacAutoUnsandboxed, api.SevWarning, m.Name,
			fmt.Sprintf("%s runs unsandboxed: auto mode on macOS does not use Seatbelt", m.Name),
			"run the node with --plugin-sandbox strict to sandbox plugins with Seatbelt")
	case in.Mode == Auto:
		dc.sandboxed = true
		dc.network = NetHostProxyVars
		dc.why = append(dc.why, "--plugin-sandbox auto: sandboxed, but the host network is kept (proxy variables set; only the plugin's own code honours them)")
	default: // strict
		dc.sandboxed = true
		dc.why = append(dc.why, "--plugin-sandbox strict: sandboxed, with egress only through the proxy")
	}
	if in.Private && in.Mode != Strict && dc.sandboxed {
		dc.network = NetProxy
	}
	dc.d.Refused = dc.refuseAll
}

// user decides who the plugin's targets run as: a per-plugin user on a root Linux
// node whose data folder others can traverse, else the node's user.
func (dc *decider) user() {
	in := dc.in
	u := User{Why: "the node's user"}
	switch {
	case dc.refuseAll != "":
	case !dc.sandboxed:
		u.Why = "unsandboxed: runs as the node's user"
	case in.OS != "linux":
		u.Why = "Seatbelt has no per-plugin users: runs as the node's user"
	case !in.Root:
		u.Why = "the node does not run as root, so there are no per-plugin users"
	case !in.DataDirTraversable:
		u.Why = "the data folder lies under a folder other users cannot traverse, so per-plugin users are off"
	case in.UserUnreachable != "":
		u.Why = "the plugin's folders are out of its user's reach (" + in.UserUnreachable + "): runs as the node's user"
		dc.finding(api.CodePluginUserFallback, api.SevWarning, dc.m.Name, u.Why, "move the data folder to one every user can traverse (0711), e.g. /var/lib/oz0-node")
	default:
		uid := PluginUID(dc.m.Name)
		u = User{PerPlugin: true, UID: uid, GID: uid, Why: fmt.Sprintf("per-plugin user %d on a root node", uid)}
	}
	dc.d.User = u
}

// target is a server's or hook's decision from the plugin-wide one and what the
// manifest declares for it.
func (dc *decider) target(kind, name string, declared manifest.SandboxKind) Target {
	t := Target{Kind: kind, Name: name, Declare: declared, Exempt: dc.exempt, Backend: BackendNone, Network: NetNone, User: dc.d.User}
	t.Reasons = append(t.Reasons, dc.why...)
	switch {
	case dc.refuseAll != "":
		t.Action = Refused
		t.Reasons = []string{dc.refuseAll}
	case !dc.sandboxed:
		t.Action = Unsandboxed
		t.Network = NetHost
	case declared == manifest.SandboxHost || declared == manifest.SandboxOwn:
		t.Action = Refused
		t.Reasons = []string{refusalText(dc.m, name, declared, dc.in)}
	default:
		t.Action = Sandboxed
		t.Backend = dc.d.Backend
		t.Network = dc.network
	}
	return t
}

// server decides one server: refused when it needs the operator's values, a
// remote one by the tenant's list, else as target decides, with a finding for a
// refusal the operator can act on.
func (dc *decider) server(s manifest.Server) Target {
	in, m := dc.in, dc.m
	t := dc.target("server", s.Name, s.Sandbox)
	if why, fix := needsConfig(m.Name, "server "+s.Name, in.Unresolved, func(u manifest.Unresolved) bool { return u.Hook < 0 && u.Server == s.Name }); why != "" && (t.Action != Refused || s.IsRemote() && dc.refuseAll == "") {
		t.Action, t.Backend, t.Network, t.Reasons = Refused, BackendNone, NetNone, []string{why}
		dc.finding(api.CodeNeedsConfig, api.SevWarning, m.Name+"/"+s.Name, why, fix)
		return t
	}
	if mp, ok := in.Missing[s.Name]; ok && t.Action != Refused && !s.IsRemote() {
		why := fmt.Sprintf("server %s of plugin %s starts %s, which is not installed on this node (looked on PATH %s); it does not start until it is", s.Name, m.Name, mp.Program, mp.Path)
		t.Action, t.Backend, t.Network, t.Reasons = Refused, BackendNone, NetNone, []string{why}
		dc.finding(api.CodeRuntimeMissing, api.SevWarning, m.Name+"/"+s.Name, why,
			fmt.Sprintf("install %s in a folder of %s that every user can read; the node starts the server at its next reconcile (kill -HUP, a call of its tools, any plugin change), no reinstall", mp.Program, mp.Path))
		return t
	}
	if s.IsRemote() && dc.refuseAll == "" {
		t = decideRemote(m, s, in.Tenant)
		if t.Action == Refused {
			dc.finding(api.CodeServerRefused, api.SevWarning, m.Name+"/"+s.Name, t.Refusal(),
				"an operator adds the host to the tenant's egress list; the server starts within a second, no restart")
		}
		return t
	}
	if t.Action == Refused && dc.refuseAll == "" {
		fix := fmt.Sprintf("if you trust %s to run unsandboxed as the node's user, start the node with --plugin-sandbox-exempt %s@%s", m.Name, m.Name, in.Commit)
		if in.Private {
			fix = "private candidates are never exempt; install the plugin from its repository to make it exemptable"
		}
		dc.finding(api.CodeServerRefused, api.SevWarning, m.Name+"/"+s.Name, t.Refusal(), fix)
	}
	return t
}

// hook decides hook i: refused when it needs the operator's values, with its
// timeout capped.
func (dc *decider) hook(i int, h manifest.Hook) Target {
	m := dc.m
	t := dc.target("hook", fmt.Sprintf("%s[%d]", h.Event, i), manifest.SandboxDefault)
	if why, fix := needsConfig(m.Name, "hook "+t.Name, dc.in.Unresolved, func(u manifest.Unresolved) bool { return u.Server == "" && u.Hook == i }); why != "" && t.Action != Refused {
		t.Action, t.Backend, t.Network, t.Reasons = Refused, BackendNone, NetNone, []string{why}
		dc.finding(api.CodeNeedsConfig, api.SevWarning, m.Name+"/"+t.Name, why, fix)
	}
	var capped bool
	if t.Timeout, capped = HookTimeout(h); capped {
		dc.finding(api.CodeHookTimeoutCapped, api.SevInfo, m.Name+"/"+t.Name,
			fmt.Sprintf("hook %s of %s asks for a %s timeout; the node stops it after %s, and a hook that runs out of time does not block", t.Name, m.Name, declaredTimeout(h), HookTimeoutCap),
			"nothing to do; the plugin's author may lower the hook's timeout")
	}
	return t
}

// build decides what the plugin's build may run (docs/promises.md §6): no package
// code under strict on tier 1 unless exempt; private candidates never run package
// code.
func (dc *decider) build() Build {
	in := dc.in
	switch {
	case in.Private && in.Tier == 0:
		return Build{Reason: "private candidate on tier 0: refused"}
	case in.Private:
		return Build{Reason: "private candidate: wheels only, npm without scripts, no build backend"}
	case dc.exempt:
		return Build{PackageCode: true, Reason: "exempt: the build may run package code, as the node's user"}
	case in.Tier == 0:
		return Build{PackageCode: true, Reason: "tier 0: the build runs as the node's user"}
	case in.Mode == Strict:
		return Build{Reason: "strict: wheels only, npm without scripts, no build backend; an exemption is needed for anything else"}
	default:
		return Build{PackageCode: true, Reason: fmt.Sprintf("%s mode: the build runs as the node's user", in.Mode)}
	}
}

// decideRemote decides a remote server: no sandbox and no plugin user (no plugin
// code runs), the node connects through its egress proxy, and only to a host the
// tenant's list allows. The URL's host counts as the manifest's egress entry.
func decideRemote(m *manifest.Manifest, s manifest.Server, tl *netrule.TenantList) Target {
	t := Target{Kind: "server", Name: s.Name, Declare: s.Sandbox, Action: Remote, Backend: BackendNone, Network: NetProxy,
		User: User{Why: "remote: no plugin code runs; the node connects to it itself"}}
	host, port, err := RemoteHostPort(s.Remote.URL)
	if err != nil {
		// Unresolved values are refused by needsConfig; this is a URL Load let through.
		t.Action, t.Network = Refused, NetNone
		t.Reasons = []string{fmt.Sprintf("remote server %s of plugin %s: url: %v", s.Name, m.Name, err)}
		return t
	}
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	t.Reasons = []string{fmt.Sprintf("remote MCP server (%s) at %s: no plugin code runs, so no sandbox; the node connects to it through its egress proxy (the URL's host counts as the manifest's entry; the tenant's list must allow it; every address is checked at dial time)", s.Remote.Type, hp)}
	switch {
	case tl == nil:
	case tl.Err != nil:
		t.Action, t.Network = Refused, NetNone
		t.Reasons = []string{fmt.Sprintf("remote server %s of plugin %s at %s is not started: the tenant's egress list %s cannot be used (%v), so nothing is reached", s.Name, m.Name, hp, tl.Path, tl.Err)}
	case !tl.Allows(host, port):
		t.Action, t.Network = Refused, NetNone
		t.Reasons = []string{fmt.Sprintf("remote server %s of plugin %s at %s is refused by the tenant's egress list %s: no line allows %s; an operator adds a line %q to that file", s.Name, m.Name, hp, tl.Path, hp, host)}
	}
	return t
}

// RemoteHostPort is the canonical host and the port a remote server's URL names
// (443 for https and 80 for http when none is written).
func RemoteHostPort(raw string) (string, int, error) {
	u, err := manifest.ParseRemoteURL(raw)
	if err != nil {
		return "", 0, err
	}
	host := u.Hostname()
	if a, aerr := netip.ParseAddr(host); aerr == nil {
		host = a.String()
	} else if host, err = netrule.CanonicalHost(host); err != nil {
		return "", 0, fmt.Errorf("host %q: %w", u.Hostname(), err)
	}
	port := 443
	if strings.EqualFold(u.Scheme, "http") {
		port = 80
	}
	if ps := u.Port(); ps != "" {
		if port, err = netrule.ParsePort(ps); err != nil {
			return "", 0, fmt.Errorf("port %q: %w", ps, err)
		}
	}
	return host, port, nil
}

// ConfigCommand is the command that sets a plugin's value for a reference name
// ("user_config.KEY" or "KEY"; both set KEY).
func ConfigCommand(plugin, refName string) string { return manifest.ConfigCommand(plugin, refName) }

// needsConfig says why a server or hook (what) cannot start for lack of the
// operator's values, and the fix; "" when nothing it uses is unresolved.
func needsConfig(plugin, what string, all []manifest.Unresolved, mine func(manifest.Unresolved) bool) (why, fix string) {
	var keys, cmds, problems []string
	for _, u := range all {
		if !mine(u) {
			continue
		}
		if u.Name == "" {
			problems = append(problems, fmt.Sprintf("%s: %s", u.Field, u.Problem))
			continue
		}
		k := strings.TrimPrefix(u.Name, manifest.UserConfigPrefix)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
			cmds = append(cmds, ConfigCommand(plugin, u.Name))
		}
	}
	switch {
	case len(keys) > 0:
		why = fmt.Sprintf("%s of plugin %s needs a value for %s, which is not set; it does not start until it is: %s",
			what, plugin, strings.Join(keys, ", "), strings.Join(cmds, "; "))
		if len(problems) > 0 {
			why += " (and " + strings.Join(problems, "; ") + ")"
		}
		return why, strings.Join(cmds, "; ")
	case len(problems) > 0:
		why = fmt.Sprintf("%s of plugin %s does not start: with the operator's values, %s", what, plugin, strings.Join(problems, "; "))
		return why, fmt.Sprintf("correct the value with oz0-node plugin config %s KEY=…", plugin)
	}
	return "", ""
}

func refusalText(m *manifest.Manifest, server string, declared manifest.SandboxKind, in Inputs) string {
	var what string
	switch declared {
	case manifest.SandboxHost:
		what = "declares sandbox: host (it must see the host)"
	case manifest.SandboxOwn:
		what = "declares sandbox: own (it starts sandboxes of its own, and nesting fails)"
		if in.OS == "darwin" {
			what += "; sandbox-exec inside Seatbelt exits 71"
		}
	}
	s := fmt.Sprintf("server %s of plugin %s %s and cannot run sandboxed, so it is refused", server, m.Name, what)
	if srv := m.Server(server); srv != nil && srv.Reason != "" {
		s += fmt.Sprintf(" (the plugin says: %q)", srv.Reason)
	}
	if in.Private {
		return s + "; private candidates are never exempt"
	}
	return s + fmt.Sprintf("; only the operator can exempt it: --plugin-sandbox-exempt %s or %s@%s", m.Name, m.Name, in.Commit)
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// declaredTimeout is the timeout a hook asked for, as its manifest wrote it.
func declaredTimeout(h manifest.Hook) string {
	if h.DeclaredTimeout > 0 {
		return strconv.FormatFloat(h.DeclaredTimeout, 'g', -1, 64) + "s"
	}
	return h.Timeout.String()
}
