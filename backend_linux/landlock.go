package backendlinux

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// The Landlock tier confines a tool without any namespace: the node starts a
// runner of its own (the reexec helper landlockHelper), which enforces a Landlock
// ruleset and the seccomp filter on one thread and starts the tool from it, so no
// rule ever applies to the node itself. What the tier keeps and what it cannot are
// in docs/promises.md §2; LandlockGaps says the latter per kernel.

// landlockHelper is the reexec name of the runner.
const landlockHelper = "landlock-run"

// Access classes a rule grants; the runner turns each into Landlock rights (for a
// file, only the file rights among them).
const (
	llRead  = "read"  // read and list; no execute (/proc)
	llExec  = "exec"  // read, list and execute (system folders, the plugin, runtimes)
	llWrite = "write" // everything within, moves between such folders included (home, tmp)
	llDev   = "dev"   // read and write a device file (/dev/null …)
)

// landlockDevices are the device files a tool may open, as bwrap's --dev gives
// them; /dev/shm and /dev/pts are not among them.
var landlockDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// landlockRule grants an access class beneath a host path. The runner opens the
// path without following a symlink anywhere on it; an optional one it does not
// find is skipped.
type landlockRule struct {
	Path     string `json:"path"`
	Access   string `json:"access"`
	Optional bool   `json:"optional,omitempty"`
}

// landlockPlan is what the runner enforces for a Spec, read from a descriptor:
// nothing of it is on a command line or in the runner's environment.
type landlockPlan struct {
	Plugin string   `json:"plugin"`
	Argv   []string `json:"argv"`
	// Env is the tool's environment; the runner has none and hands it on only at
	// its exec of the tool. TMPDIR names the private tmp.
	Env []string `json:"env"`
	Dir string   `json:"dir"`
	// SwitchUser: the runner, started as root, becomes UID/GID (no supplementary
	// groups) before it confines anything.
	SwitchUser bool     `json:"switch_user,omitempty"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Limits     []llRlim `json:"rlimits"`
	// Cgroups are the sandbox's cgroup folders, which the runner joins (as root,
	// before anything else) unless it was born inside them.
	Cgroups []string       `json:"cgroups,omitempty"`
	Rules   []landlockRule `json:"rules"`
	// ProxyOnly: TCP connect only to ConnectPort (none when 0), no bind, and the
	// seccomp rules for what Landlock does not see (landlockVariant). Off, the
	// host's network is kept (auto mode).
	ProxyOnly   bool `json:"proxy_only,omitempty"`
	ConnectPort int  `json:"connect_port,omitempty"`
	// NodeUser: the tool runs as the node's own user (landlockVariant).
	NodeUser bool `json:"node_user,omitempty"`
	// Tmp is the private tmp made for this start (writable, TMPDIR).
	Tmp string `json:"tmp"`
}

// llRlim is an rlimit as the runner reads it.
type llRlim struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

func (p *landlockPlan) variant() landlockVariant {
	return landlockVariant{ProxyOnly: p.ProxyOnly, NodeUser: p.NodeUser}
}

// buildLandlock turns a Spec into the runner's plan. It decides only: the private
// tmp and the cgroup are the runner's to fill in at start.
func buildLandlock(s *sandbox.Spec, inspect Inspect) (*landlockPlan, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("plugin %s: empty command", s.Plugin)
	}
	if err := checkSeccompProfile(s); err != nil {
		return nil, err
	}
	p := &landlockPlan{Plugin: s.Plugin, Argv: append([]string(nil), s.Argv...), Dir: s.Dir, NodeUser: !s.PluginUser}
	if p.Dir == "" {
		p.Dir = "/"
	}
	if s.PluginUser {
		p.SwitchUser, p.UID, p.GID = true, s.UID, s.GID
	}
	for _, kv := range s.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("plugin %s: environment entry %q holds a NUL byte", s.Plugin, kv)
		}
	}
	p.Env = append([]string(nil), s.Env...)
	switch s.Network {
	case policy.NetProxy:
		p.ProxyOnly = true
		if s.Proxy != nil && s.Proxy.SocketDir == "" {
			p.ConnectPort = s.Proxy.Port
		}
	case policy.NetIsolated:
		p.ProxyOnly = true // and no port: no TCP connect at all
	case policy.NetHostProxyVars:
	default:
		return nil, fmt.Errorf("plugin %s: network %q is not one a Landlock sandbox gives", s.Plugin, s.Network)
	}
	if p.ConnectPort < 0 || p.ConnectPort > 65535 {
		return nil, fmt.Errorf("plugin %s: proxy port %d", s.Plugin, p.ConnectPort)
	}
	writable := writableDests(s)
	add := func(m sandbox.Mount, access string) error {
		if path.Clean(m.Dest) != path.Clean(m.Source) {
			// No mount namespace: a path is where it is on the host.
			return fmt.Errorf("plugin %s: a Landlock sandbox cannot show %s at %s", s.Plugin, m.Source, m.Dest)
		}
		info, skip, err := mountCheck(s, m, path.Clean(m.Dest), writable, inspect)
		if err != nil || skip {
			return err
		}
		if info.Symlink != "" {
			return nil // a system link (/bin → usr/bin): the path it names has its own rule
		}
		p.Rules = append(p.Rules, landlockRule{Path: path.Clean(m.Source), Access: access, Optional: m.Optional})
		return nil
	}
	for _, m := range s.System {
		if err := add(m, llExec); err != nil {
			return nil, err
		}
	}
	for _, m := range s.Mounts {
		access := llExec
		if m.Writable {
			access = llWrite
		}
		if err := add(m, access); err != nil {
			return nil, err
		}
	}
	p.Rules = append(p.Rules, landlockRule{Path: "/proc", Access: llRead})
	for _, d := range landlockDevices {
		p.Rules = append(p.Rules, landlockRule{Path: d, Access: llDev, Optional: true})
	}
	for _, r := range rlimits(s) {
		p.Limits = append(p.Limits, llRlim{Resource: r.resource, Value: r.value})
	}
	return p, nil
}

// withTmp points the plan's TMPDIR at the private tmp made for this start and
// grants it.
func (p *landlockPlan) withTmp(tmp string) {
	p.Tmp = tmp
	p.Rules = append(p.Rules, landlockRule{Path: tmp, Access: llWrite})
	env := p.Env[:0:0]
	for _, kv := range p.Env {
		if !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	p.Env = append(env, "TMPDIR="+tmp)
}

// LandlockGap is one promise the Landlock tier cannot keep on a node: an ID the
// escape battery names it by, and the operator's words for it.
type LandlockGap struct {
	ID   string
	Text string
}

// LandlockGaps are what the Landlock tier does not cover with this kernel's
// Landlock ABI (0 when unknown: only the tier's own gaps), on a root node or not.
// status, `sandbox show` and doctor list them; docs/promises.md names each.
func LandlockGaps(abi int, root bool) []LandlockGap {
	out := []LandlockGap{
		{"pid-namespace", "Landlock tier, no PID namespace: the tool sees every host process in /proc with its command line and status (and, of its own user's, its descriptor numbers), never its environment, memory or open files, and can trace or signal none outside its sandbox"},
		{"mount-namespace", "Landlock tier, no mount namespace: outside the allowlist whether a file exists and its metadata (stat) stay visible, never its content or a folder's listing; a file's times can be changed where its user owns it"},
		{"ipc-namespace", "Landlock tier, no IPC namespace: System V IPC and POSIX message queues are refused, and there is no /dev/shm"},
		{"transparent-egress", "Landlock tier, no network namespace: no transparent egress (only programs that honour the proxy variables reach the network) and no DNS inside"},
		{"port-not-address", "Landlock tier: TCP connect is allowed by port, not address, so a host that listens on the proxy endpoint's port number is reachable directly"},
	}
	if !root {
		out = append(out, LandlockGap{"no-cgroup", "Landlock tier on a non-root node: no cgroup, so no memory, process or CPU limits, and a process the tool detaches from its session outlives a forced stop (kill -9) of the sandbox's runner"})
	}
	if abi <= 0 {
		return out
	}
	v := "Landlock ABI " + strconv.Itoa(abi)
	if abi < 3 {
		out = append(out, LandlockGap{"abi-truncate", v + " cannot refuse truncating a file on the read-only allowlist that the tool's user may write"})
	}
	if abi < 4 {
		out = append(out, LandlockGap{"abi-network", v + " has no network rules: the tool can connect anywhere directly; only its own code honours the proxy"})
	}
	if abi < 5 {
		out = append(out, LandlockGap{"abi-ioctl", v + " does not confine ioctl on the device files the tool opens"})
	}
	if abi < 6 {
		out = append(out, LandlockGap{"abi-signal", v + " cannot scope signals: the tool can signal processes of its own user outside the sandbox (on a non-root node, the node)"})
	}
	return out
}

// LandlockNotCovered is LandlockGaps in words.
func LandlockNotCovered(abi int, root bool) []string {
	var out []string
	for _, g := range LandlockGaps(abi, root) {
		out = append(out, g.Text)
	}
	return out
}

func renderLandlock(s *sandbox.Spec, inspect Inspect, abi int, root bool) (string, error) {
	p, err := buildLandlock(s, inspect)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# landlock: the node binary as runner %q, started with an empty environment", "oz0:"+landlockHelper)
	if p.SwitchUser {
		fmt.Fprintf(&b, " as root; it joins the sandbox's cgroup and sets the limits, and the tool runs as uid %d gid %d (no supplementary groups, no capabilities)", p.UID, p.GID)
	}
	b.WriteString("\n# its plan is read from fd 3; fd 4 is held by the node, and the runner kills the sandbox when it closes\n")
	b.WriteString("# on one thread it sets no_new_privs, enforces the Landlock ruleset and the seccomp filter, and starts the tool from it in a session of its own;\n")
	b.WriteString("# the runner stays outside the sandbox, its reaper: when the tool ends, everything it left is killed\n")
	fmt.Fprintf(&b, "%s", quote(p.Argv[0]))
	for _, a := range p.Argv[1:] {
		b.WriteString(" " + quote(a))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "# working folder: %s\n", p.Dir)
	b.WriteString("# the tool's environment (TMPDIR: a private folder made at start below the data folder's run/tmp, removed at the end):\n")
	for _, kv := range p.Env {
		b.WriteString("#   " + kv + "\n")
	}
	fmt.Fprintf(&b, "# limits: %s\n", limitsText(s))
	b.WriteString("# Landlock rules (nothing else is reachable; paths opened without following symlinks):\n")
	for _, r := range p.Rules {
		opt := ""
		if r.Optional {
			opt = " (if present)"
		}
		fmt.Fprintf(&b, "%-5s %s%s\n", r.Access, r.Path, opt)
	}
	switch {
	case p.ProxyOnly && p.ConnectPort > 0:
		fmt.Fprintf(&b, "# network: TCP connect to port %d only (the egress proxy, with this sandbox's credential); no bind, no listen, no other socket\n", p.ConnectPort)
	case p.ProxyOnly:
		b.WriteString("# network: TCP connect only to its egress endpoint's port on the host's loopback, where it has one (the node assigns it when it opens the endpoint; none here); no bind, no listen, no other socket\n")
	default:
		b.WriteString("# network: the host's (auto mode); proxy variables set\n")
	}
	b.WriteString("# scoped: signals and abstract unix sockets stay within the sandbox\n")
	rules := "unix sockets (socketpair stays), System V IPC and POSIX message queues refused"
	if p.ProxyOnly {
		rules += "; every socket but TCP, listen and MSG_FASTOPEN refused"
	}
	if p.NodeUser {
		rules += "; chmod and chown by path refused"
	}
	fmt.Fprintf(&b, "# seccomp: the default profile, plus the Landlock tier's rules: %s\n", rules)
	b.WriteString("# not covered on this tier:\n")
	for _, g := range LandlockNotCovered(abi, root) {
		b.WriteString("#   " + g + "\n")
	}
	return b.String(), nil
}
