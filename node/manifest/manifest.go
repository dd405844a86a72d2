// Package manifest reads a plugin folder (Agent Plugins 1.0 or Claude Code layout) into
// a validated Manifest. It parses JSON and does path arithmetic only: nothing the
// plugin wrote is ever executed, and no symlink is followed out of the plugin folder.
package manifest

import (
	"sort"
	"strings"
	"time"

	"oz0.ai/node/node/netrule"
)

// SandboxKind is a server's declared relation to sandboxes.
type SandboxKind string

const (
	// SandboxDefault servers run in the plugin's sandbox.
	SandboxDefault SandboxKind = "default"
	// SandboxHost servers must see the host (e.g. a host health checker).
	SandboxHost SandboxKind = "host"
	// SandboxOwn servers start sandboxes of their own; nesting fails.
	SandboxOwn SandboxKind = "own"
)

// Isolation values a manifest may require.
const IsolationGVisor = "gvisor"

// ReservedNamespace belongs to first-party plugins.
const ReservedNamespace = "ai.oz0"

// Manifest is a plugin as read from its folder. String fields keep placeholders
// unexpanded; Expand resolves them for one installation.
type Manifest struct {
	// File is the manifest file, relative to the plugin folder.
	File string `json:"file"`
	// Layout is "agent-plugins" (plugin.json) or "claude-code" (.claude-plugin/plugin.json).
	Layout      string `json:"layout"`
	Name        string `json:"name"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	Author      string `json:"author,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	// Isolation is "" or "gvisor" (a plugin that must run on the stronger Linux tier).
	Isolation string        `json:"isolation,omitempty"`
	Egress    []EgressEntry `json:"egress,omitempty"`
	Servers   []Server      `json:"servers,omitempty"` // sorted by name
	Hooks     []Hook        `json:"hooks,omitempty"`   // in file order
	// ServersFile and HooksFile name where servers and hooks came from ("" if none).
	ServersFile string `json:"servers_file,omitempty"`
	HooksFile   string `json:"hooks_file,omitempty"`
}

// ID is the plugin identity "<namespace>/<name>" (just the name without a namespace).
func (m *Manifest) ID() string {
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// Server returns the named server, or nil.
func (m *Manifest) Server(name string) *Server {
	for i := range m.Servers {
		if m.Servers[i].Name == name {
			return &m.Servers[i]
		}
	}
	return nil
}

// EgressEntry is one `egress` item: a host pattern with the ports it is allowed on
// and the reason shown to the operator.
type EgressEntry struct {
	Host   string `json:"host"`
	Ports  []int  `json:"ports,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Patterns turns entries into matchable patterns (one per entry; ports merged).
// Entries are validated at load, so errors here mean a caller built them by hand.
func Patterns(entries []EgressEntry) ([]netrule.Pattern, error) {
	out := make([]netrule.Pattern, 0, len(entries))
	for _, e := range entries {
		p, err := netrule.ParsePattern(e.Host)
		if err != nil {
			return nil, err
		}
		if len(e.Ports) > 0 {
			p.Ports = append([]int(nil), e.Ports...)
		}
		out = append(out, p)
	}
	return out, nil
}

// Limits are a server's resource limits; zero means the node's default.
type Limits struct {
	MemoryMB  int `json:"memory_mb,omitempty"`
	Pids      int `json:"pids,omitempty"`
	CPUPct    int `json:"cpu_percent,omitempty"` // of one core
	OpenFiles int `json:"open_files,omitempty"`
}

// Server is one stdio MCP server.
type Server struct {
	Name    string            `json:"name"`
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Sandbox SandboxKind       `json:"sandbox"`
	Reason  string            `json:"reason,omitempty"`
	// Egress, when non-nil, narrows the plugin's egress for this server: a host must
	// be in both.
	Egress []EgressEntry `json:"egress,omitempty"`
	Limits Limits        `json:"limits,omitzero"`
}

// EnvList returns the server's environment as sorted KEY=VALUE pairs.
func (s *Server) EnvList() []string {
	out := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Hook is one command hook.
type Hook struct {
	Event   string        `json:"event"`
	Matcher string        `json:"matcher,omitempty"`
	Command string        `json:"command"`
	Timeout time.Duration `json:"timeout"`
}

// DefaultHookTimeout applies when a hook names none.
const DefaultHookTimeout = 60 * time.Second

// HookEvents are the events a hook may name.
var HookEvents = []string{"SessionStart", "SessionEnd", "PreToolUse", "PostToolUse",
	"UserPromptSubmit", "Notification", "Stop", "SubagentStop", "PreCompact"}

// Placeholders are the variables a manifest may use, and where each points.
var Placeholders = []string{"PLUGIN_ROOT", "PLUGIN_DATA", "CLAUDE_PLUGIN_ROOT", "CLAUDE_PLUGIN_DATA"}

// Vars are the values placeholders expand to for one installation.
type Vars struct {
	Root string // the installed plugin folder
	Data string // the plugin's home / persistent data folder
}

func (v Vars) replacer() *strings.Replacer {
	return strings.NewReplacer(
		"${PLUGIN_ROOT}", v.Root, "${CLAUDE_PLUGIN_ROOT}", v.Root,
		"${PLUGIN_DATA}", v.Data, "${CLAUDE_PLUGIN_DATA}", v.Data,
	)
}

// Expand returns a copy whose server and hook strings have their placeholders
// replaced as text. Validation already refused any other ${…}.
func (m *Manifest) Expand(v Vars) *Manifest {
	r := v.replacer()
	out := *m
	out.Servers = make([]Server, len(m.Servers))
	for i, s := range m.Servers {
		s.Command = r.Replace(s.Command)
		s.Cwd = r.Replace(s.Cwd)
		s.Args = replaceAll(r, s.Args)
		if s.Env != nil {
			env := make(map[string]string, len(s.Env))
			for k, val := range s.Env {
				env[k] = r.Replace(val)
			}
			s.Env = env
		}
		out.Servers[i] = s
	}
	out.Hooks = make([]Hook, len(m.Hooks))
	for i, h := range m.Hooks {
		h.Command = r.Replace(h.Command)
		out.Hooks[i] = h
	}
	return &out
}

func replaceAll(r *strings.Replacer, ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = r.Replace(s)
	}
	return out
}
