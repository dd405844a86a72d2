package manifest

import (
	"fmt"
	"strings"

	"oz0.ai/node/node/netrule"
)

// Severity of a lint diagnostic.
type Severity string

const (
	SevError   Severity = "error"
	SevWarning Severity = "warning"
)

// Diagnostic is one lint result.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	File     string   `json:"file"`
	Field    string   `json:"field,omitempty"`
	Message  string   `json:"message"`
}

func (d Diagnostic) String() string {
	loc := d.File
	if d.Field != "" {
		loc += ": " + d.Field
	}
	return fmt.Sprintf("%s: %s: %s", d.Severity, loc, d.Message)
}

// Lint loads the plugin in dir and returns every error and warning. It never
// runs anything from the plugin. The manifest is nil when there are errors.
func Lint(dir string, opts Options) (*Manifest, []Diagnostic) {
	m, err := Load(dir, opts)
	if err != nil {
		es, ok := AsErrors(err)
		if !ok {
			return nil, []Diagnostic{{Severity: SevError, File: dir, Message: err.Error()}}
		}
		out := make([]Diagnostic, len(es))
		for i, e := range es {
			out[i] = Diagnostic{Severity: SevError, File: e.File, Field: e.Field, Message: e.Msg}
		}
		return nil, out
	}
	return m, Warnings(m)
}

// Warnings are what an operator should know before installing a valid plugin.
func Warnings(m *Manifest) []Diagnostic {
	out := append([]Diagnostic(nil), m.Notices...)
	warn := func(file, field, format string, args ...any) {
		out = append(out, Diagnostic{Severity: SevWarning, File: file, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	ext := "extensions.\"ai.oz0\""
	for _, s := range m.Servers {
		f := ext + ".servers." + s.DisplayName()
		if s.Remote != nil {
			host := s.Remote.Host()
			if host == "" {
				host = "a host from a config value"
			}
			warn(m.ServersFile, "", "server %q is remote (%s, %s): no plugin code runs for it and it has no sandbox; the node connects to it itself, only if the tenant list allows its host", s.DisplayName(), s.Remote.Type, host)
		}
		if s.Label != "" {
			warn(m.ServersFile, "", "server %q is called %q by the node (names are letters, digits, '_', '.' and '-')", s.Label, s.Name)
		}
		switch s.Sandbox {
		case SandboxHost:
			warn(m.File, f+".sandbox", "server %q declares sandbox: host (it must see the host); the node refuses it unless the operator exempts the plugin with --plugin-sandbox-exempt %s, and it then runs unsandboxed as the node's user", s.Name, m.Name)
		case SandboxOwn:
			warn(m.File, f+".sandbox", "server %q declares sandbox: own (it starts sandboxes of its own, and nesting fails); the node refuses it unless the operator exempts the plugin with --plugin-sandbox-exempt %s, and it then runs unsandboxed as the node's user", s.Name, m.Name)
		}
		if s.Sandbox != SandboxDefault && s.Reason == "" {
			warn(m.File, f+".reason", "no reason given for sandbox: %s; the operator is shown this reason when deciding on an exemption", s.Sandbox)
		}
		lintEgress(warn, m.File, f+".egress", s.Egress)
	}
	lintEgress(warn, m.File, ext+".egress", m.Egress)
	lintValues(warn, m)
	if m.RunsNothing() {
		if parts := m.NotRunSummary(); parts != "" {
			warn(m.File, "", "the plugin is made only of %s: parts for the agent itself, which the node recognises and does not run; installing it runs nothing", parts)
		} else {
			warn(m.File, "", "the plugin declares no MCP servers, hooks or other parts")
		}
	} else if parts := m.NotRunSummary(); parts != "" {
		warn(m.File, "", "the plugin also has %s: parts for the agent itself, which the node does not run", parts)
	}
	if m.Isolation == IsolationGVisor {
		warn(m.File, ext+".isolation", "the plugin requires gVisor: on nodes without a working runsc (and on macOS) it is refused")
	}
	used := m.referencedKeys()
	for _, k := range m.SecretKeys() {
		if !used[k] {
			warn(m.File, ext+".secrets."+k, "no server or hook uses ${%s} or ${user_config.%s}: the binding applies to nothing", k, k)
		}
		if m.Secrets[k].Reason == "" {
			warn(m.File, ext+".secrets."+k+".reason", "no reason given for where the secret %s may go; the operator is shown it", k)
		}
	}
	return out
}

// referencedKeys are the keys (a userConfig key or a ${VAR} name) the servers
// and hooks reference.
func (m *Manifest) referencedKeys() map[string]bool {
	out := map[string]bool{}
	add := func(ss ...string) {
		for _, s := range ss {
			refs, _ := Refs(s)
			for _, r := range refs {
				if k, ok := r.UserConfigKey(); ok {
					out[k] = true
				} else {
					out[r.Name] = true
				}
			}
		}
	}
	for _, s := range m.Servers {
		add(s.Command, s.Cwd)
		add(s.Args...)
		for _, v := range s.Env {
			add(v)
		}
		if s.Remote != nil {
			add(s.Remote.URL)
			for _, v := range s.Remote.Headers {
				add(v)
			}
		}
	}
	for _, h := range m.Hooks {
		add(h.Command)
		add(h.Args...)
	}
	return out
}

func lintEgress(warn func(file, field, format string, args ...any), file, field string, es []EgressEntry) {
	for i, e := range es {
		f := fmt.Sprintf("%s[%d]", field, i)
		if e.Reason == "" {
			warn(file, f+".reason", "egress to %s has no reason; the operator is shown it when writing the tenant list", e.Host)
		}
		if p, err := netrule.ParsePattern(e.Host); err == nil && p.Broad() {
			warn(file, f+".host", "%s allows every host under a whole registrable domain; name the hosts the plugin needs", e.Host)
		}
	}
}

// lintValues names each value the operator must set before a server or hook
// starts (a ${VAR} without a default, a required userConfig key without one),
// with the command that sets it: lint knows no operator's values, so every such
// reference is one.
func lintValues(warn func(file, field, format string, args ...any), m *Manifest) {
	_, unresolved := m.ExpandAll(Vars{Root: "/plugin", Data: "/data"}, nil)
	done := map[string]bool{}
	for _, u := range unresolved {
		if u.Name == "" || !m.HoldsBack(u) {
			continue
		}
		key := strings.TrimPrefix(u.Name, UserConfigPrefix)
		what, file := "server "+u.Server, m.ServersFile
		if s := m.Server(u.Server); s != nil {
			what = "server " + s.DisplayName()
		}
		if u.Hook >= 0 {
			what, file = fmt.Sprintf("hook %s[%d]", m.Hooks[u.Hook].Event, u.Hook), m.HooksFile
		}
		if file == "" {
			file = m.File
		}
		field := u.Field
		if s := m.Server(u.Server); s != nil && u.Hook < 0 {
			field = s.DisplayName() + "." + u.Field
		}
		if done[what+"\x00"+key] {
			continue
		}
		done[what+"\x00"+key] = true
		warn(file, field, "%s needs %s: %s", what, key, ConfigCommand(m.Name, u.Name))
	}
}
