// Package manifest reads a plugin folder (Agent Plugins 1.0 or Claude Code layout) into
// a validated Manifest. It parses JSON and does path arithmetic only: nothing the
// plugin wrote is ever executed, and no symlink is followed out of the plugin folder.
package manifest

import (
	"sort"
	"strings"

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
	DisplayName string `json:"display_name,omitempty"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	Author      string `json:"author,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	// Isolation is "" or "gvisor" (a plugin that must run on the stronger Linux tier).
	Isolation string        `json:"isolation,omitempty"`
	Egress    []EgressEntry `json:"egress,omitempty"`
	Servers   []Server      `json:"servers,omitempty"` // sorted by name
	Hooks     []Hook        `json:"hooks,omitempty"`   // in file order
	// ServersFile and HooksFile name where servers and hooks came from ("" if none;
	// the first file when they came from several).
	// Bundles are the MCPB bundles mcpServers names (mcpb.go).
	Bundles     []Bundle `json:"bundles,omitempty"`
	ServersFile string   `json:"servers_file,omitempty"`
	HooksFile   string   `json:"hooks_file,omitempty"`
	// RefusedHooks are hooks the node does not run (a type other than command, an
	// `if` it cannot read), each with the reason; the plugin's other parts still load.
	RefusedHooks []RefusedHook `json:"refused_hooks,omitempty"`
	// UserConfig are the values the plugin asks the operator for, by key.
	UserConfig map[string]UserConfigOption `json:"user_config,omitempty"`
	// Secrets bind secrets to hosts, by key (extensions."ai.oz0".secrets).
	Secrets map[string]SecretBinding `json:"secrets,omitempty"`
	// NotRun are the parts of the plugin the node recognises but does not run
	// (skills, commands, agents…): they are for the agent itself.
	NotRun []Component `json:"not_run,omitempty"`
	// Notices are warnings found while loading (a second manifest ignored, a hook
	// field the node ignores, a capped timeout…); Warnings includes them.
	Notices []Diagnostic `json:"notices,omitempty"`
}

// RunsNothing reports whether the plugin has no server and no hook for the node
// to run (for instance a plugin made only of skills).
func (m *Manifest) RunsNothing() bool {
	return len(m.Servers) == 0 && len(m.Hooks) == 0 && len(m.Bundles) == 0
}

// Component is one part of a plugin the node recognises and does not run.
type Component struct {
	// Kind is the manifest key naming the part: commands, agents, skills,
	// outputStyles, lspServers, monitors, themes or channels.
	Kind string `json:"kind"`
	// Source is where it was found: a manifest field ("plugin.json: skills") or
	// a default location ("skills/", ".lsp.json").
	Source string `json:"source"`
}

// ID is the plugin identity "<namespace>/<name>" (just the name without a namespace).
func (m *Manifest) ID() string {
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// Server returns the named server (by the node's name for it, or else by the name
// as the plugin wrote it), or nil.
func (m *Manifest) Server(name string) *Server {
	for i := range m.Servers {
		if m.Servers[i].Name == name {
			return &m.Servers[i]
		}
	}
	for i := range m.Servers {
		if m.Servers[i].Label != "" && m.Servers[i].Label == name {
			return &m.Servers[i]
		}
	}
	return nil
}

// ServerEgress maps each server that narrows the plugin's egress to its own list;
// a server without one (nil Egress) is absent and has the plugin's.
func (m *Manifest) ServerEgress() map[string][]EgressEntry {
	out := map[string][]EgressEntry{}
	for _, s := range m.Servers {
		if s.Egress != nil {
			out[s.Name] = s.Egress
		}
	}
	return out
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

// Server is one MCP server: a stdio command run sandboxed, or (Remote set) a remote
// server the gateway connects to itself, which runs no plugin code.
type Server struct {
	// Name is the server's name as the node uses it (files, status, tool routing):
	// always a valid MCP name part, see ServerID. Label is the name as the plugin
	// wrote it, when that differs.
	Name    string            `json:"name"`
	Label   string            `json:"label,omitempty"`
	Remote  *Remote           `json:"remote,omitempty"`
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

// IsRemote reports whether the server is remote (no command runs for it).
func (s *Server) IsRemote() bool { return s.Remote != nil }

// DisplayName is the name as the plugin wrote it.
func (s *Server) DisplayName() string {
	if s.Label != "" {
		return s.Label
	}
	return s.Name
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

// Placeholders are the variables a manifest may use, and where each points.
var Placeholders = []string{"PLUGIN_ROOT", "PLUGIN_DATA", "CLAUDE_PLUGIN_ROOT", "CLAUDE_PLUGIN_DATA"}

// Vars are the values placeholders expand to for one installation.
type Vars struct {
	Root string // the installed plugin folder
	Data string // the plugin's home / persistent data folder
}

func (v Vars) replacer(home bool) *strings.Replacer {
	pairs := []string{
		"${PLUGIN_ROOT}", v.Root, "${CLAUDE_PLUGIN_ROOT}", v.Root,
		"${PLUGIN_DATA}", v.Data, "${CLAUDE_PLUGIN_DATA}", v.Data,
	}
	if home {
		// A server's ${HOME} is the plugin's own home; in a hook command it is
		// the shell's, which the sandbox sets to the same folder.
		pairs = append(pairs, "${HOME}", v.Data)
	}
	return strings.NewReplacer(pairs...)
}

// Expand returns a copy whose server and hook strings have their plugin-folder
// placeholders (and a server's ${HOME}) replaced as text. Other references
// (${VAR}, ${user_config.KEY}) stay as written; ExpandAll resolves them from the
// operator's values.
func (m *Manifest) Expand(v Vars) *Manifest {
	r, hr := v.replacer(true), v.replacer(false)
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
		if s.Remote != nil {
			rm := *s.Remote
			rm.URL = r.Replace(rm.URL)
			rm.Headers = replaceMap(r, rm.Headers)
			s.Remote = &rm
		}
		out.Servers[i] = s
	}
	out.Hooks = make([]Hook, len(m.Hooks))
	for i, h := range m.Hooks {
		h.Command = hr.Replace(h.Command)
		h.Args = replaceAll(hr, h.Args)
		out.Hooks[i] = h
	}
	return &out
}

func replaceMap(r *strings.Replacer, m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = r.Replace(v)
	}
	return out
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
