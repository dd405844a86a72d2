package manifest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// UserConfigPrefix starts a reference to a declared userConfig key: ${user_config.KEY}.
const UserConfigPrefix = "user_config."

// Ref is one ${…} reference in a manifest string.
type Ref struct {
	// Name is what stands between "${" and ":-" or "}": an environment-style name
	// (API_KEY, HOME, CLAUDE_PLUGIN_ROOT) or "user_config.KEY".
	Name string `json:"name"`
	// Default is the text after ":-", used when no value is set.
	Default    string `json:"default,omitempty"`
	HasDefault bool   `json:"has_default,omitempty"`
}

// UserConfigKey returns KEY for a ${user_config.KEY} reference.
func (r Ref) UserConfigKey() (string, bool) {
	return strings.CutPrefix(r.Name, UserConfigPrefix)
}

var (
	varNameRE    = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)
	configKeyRE  = varNameRE
	refRE        = lazyre.New(`\$\{([^}]*)\}`)
	errUntermRef = errors.New("unterminated placeholder (a \"${\" without its \"}\")")
)

// Refs lists the references in s, in order, or says why one is malformed. The
// syntax is Claude Code's: ${NAME}, ${NAME:-default} and ${user_config.KEY}; a
// default runs to the first "}".
func Refs(s string) ([]Ref, error) {
	var out []Ref
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			return out, nil
		}
		rest = rest[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			return out, errUntermRef
		}
		body := rest[:j]
		rest = rest[j+1:]
		r := Ref{Name: body}
		if name, def, ok := strings.Cut(body, ":-"); ok {
			r = Ref{Name: name, Default: def, HasDefault: true}
		}
		if err := checkRefName(r.Name); err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func checkRefName(name string) error {
	if key, ok := strings.CutPrefix(name, UserConfigPrefix); ok {
		if !configKeyRE.MatchString(key) {
			return fmt.Errorf("${%s}: a userConfig key is letters, digits and '_'", name)
		}
		return nil
	}
	if !varNameRE.MatchString(name) {
		return fmt.Errorf("${%s}: not a variable name (letters, digits and '_', or user_config.KEY)", name)
	}
	return nil
}

// Expand replaces every reference in s by lookup's value, else by its default.
// It returns the names that had neither (their reference expands to ""), each once,
// in order. A malformed reference is left as written; Load refuses such strings,
// so this happens only for text that did not come through Load.
//
// Expand never reads the process environment: where values come from is the
// caller's choice (the operator's per-plugin config), so lookup is the only source.
func Expand(s string, lookup func(name string) (string, bool)) (string, []string) {
	return expand(s, lookup, nil, nil)
}

// expand is Expand with a last source, fallback, tried after the reference's own
// default, and a filter: a reference whose name only does not pass is left as written.
func expand(s string, lookup, fallback func(name string) (string, bool), only func(name string) bool) (string, []string) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	var missing []string
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			b.WriteString(rest[i:])
			break
		}
		body := rest[i+2 : i+j]
		name, def, hasDef := strings.Cut(body, ":-")
		if checkRefName(name) != nil || only != nil && !only(name) {
			b.WriteString(rest[i : i+j+1])
			rest = rest[i+j+1:]
			continue
		}
		v, ok := "", false
		if lookup != nil {
			v, ok = lookup(name)
		}
		if !ok && !hasDef && fallback != nil {
			v, ok = fallback(name)
		}
		switch {
		case ok:
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
		rest = rest[i+j+1:]
	}
	return b.String(), missing
}

// hookRefsIn checks the references of a hook's command or argument: only
// ${user_config.KEY} must name a declared key; any other ${…} is the shell's.
func (l *loader) hookRefsIn(file, field, s string) {
	for _, sub := range refRE.FindAllStringSubmatch(s, -1) {
		name, _, _ := strings.Cut(sub[1], ":-")
		if strings.HasPrefix(name, UserConfigPrefix) {
			l.refsIn(file, field, sub[0])
		}
	}
}

// refsIn returns the references of s and records a field error for a malformed
// one or for a ${user_config.KEY} the manifest does not declare.
func (l *loader) refsIn(file, field, s string) []Ref {
	refs, err := Refs(s)
	if err != nil {
		l.c.add(file, field, "%v", err)
	}
	for _, r := range refs {
		if key, ok := r.UserConfigKey(); ok && l.m.UserConfig != nil {
			if _, declared := l.m.UserConfig[key]; !declared {
				l.c.add(file, field, "${%s}: no key %q in userConfig", r.Name, key)
			}
		} else if ok {
			l.c.add(file, field, "${%s}: the manifest declares no userConfig", r.Name)
		}
	}
	return refs
}

// Unresolved is a reference ExpandAll could not fill, or a value it refused once
// filled in. A server or hook with one does not start.
type Unresolved struct {
	Server string `json:"server,omitempty"` // the server's Name, or "" for a hook
	Hook   int    `json:"hook"`             // the index in Hooks, or -1 for a server
	Field  string `json:"field"`            // "args[1]", "env.TOKEN", "url", "headers.Authorization"
	// Name is the reference without a value ("API_KEY", "user_config.token"); ""
	// when the expanded value itself is refused (Problem says why).
	Name    string `json:"name,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// ExpandAll returns a copy with every reference resolved: the plugin-folder
// placeholders and ${HOME} from v (HOME is the plugin's own home, v.Data), any
// other name from lookup (the operator's values for this plugin; for
// ${user_config.KEY} the name passed is "user_config.KEY"), then a ${…:-default},
// then a declared userConfig default. It lists what stayed unresolved, and a
// remote server's URL or header that is not valid once expanded.
func (m *Manifest) ExpandAll(v Vars, lookup func(name string) (string, bool)) (*Manifest, []Unresolved) {
	if lookup == nil {
		return m.ExpandScoped(v, nil)
	}
	return m.ExpandScoped(v, func(_ Scope, name string) (string, bool) { return lookup(name) })
}

// Scope is where a reference is expanded: a server's field (Hook -1) or hook
// Hook's.
type Scope struct {
	Server string
	Hook   int
}

// ExpandScoped is ExpandAll with a lookup told where each reference stands: a
// value may differ by server (a secret's sentinel is unique to its server,
// docs/promises.md §17).
func (m *Manifest) ExpandScoped(v Vars, lookup func(sc Scope, name string) (string, bool)) (*Manifest, []Unresolved) {
	lookIn := func(sc Scope) func(name string) (string, bool) {
		return func(name string) (string, bool) {
			switch name {
			case "PLUGIN_ROOT", "CLAUDE_PLUGIN_ROOT":
				return v.Root, true
			case "PLUGIN_DATA", "CLAUDE_PLUGIN_DATA", "HOME":
				return v.Data, true
			}
			if lookup != nil {
				if val, ok := lookup(sc, name); ok {
					return val, true
				}
			}
			return "", false
		}
	}
	var issues []Unresolved
	out := *m
	declared := func(name string) (string, bool) {
		if key, ok := strings.CutPrefix(name, UserConfigPrefix); ok {
			if o, ok := m.UserConfig[key]; ok {
				return o.DefaultText()
			}
		}
		return "", false
	}
	// A hook's command is shell text: the node fills in the plugin's folders and
	// its userConfig values, and leaves every other ${…} to the shell in the sandbox.
	hookOnly := func(name string) bool {
		_, isKey := strings.CutPrefix(name, UserConfigPrefix)
		return isKey || slices.Contains(Placeholders, name)
	}
	one := func(server string, hook int, field, s string) string {
		var only func(string) bool
		if hook >= 0 {
			only = hookOnly
		}
		val, missing := expand(s, lookIn(Scope{Server: server, Hook: hook}), declared, only)
		for _, n := range missing {
			issues = append(issues, Unresolved{Server: server, Hook: hook, Field: field, Name: n})
		}
		if strings.ContainsRune(val, 0) {
			issues = append(issues, Unresolved{Server: server, Hook: hook, Field: field, Problem: "the value holds a NUL byte"})
		}
		return val
	}
	list := func(server string, hook int, field string, ss []string) []string {
		if ss == nil {
			return nil
		}
		r := make([]string, len(ss))
		for i, s := range ss {
			r[i] = one(server, hook, fmt.Sprintf("%s[%d]", field, i), s)
		}
		return r
	}
	dict := func(server, field string, kv map[string]string) map[string]string {
		if kv == nil {
			return nil
		}
		r := make(map[string]string, len(kv))
		for _, k := range sortedKeys(kv) {
			r[k] = one(server, -1, field+"."+k, kv[k])
		}
		return r
	}
	out.Servers = make([]Server, len(m.Servers))
	for i, s := range m.Servers {
		s.Command = one(s.Name, -1, "command", s.Command)
		s.Args = list(s.Name, -1, "args", s.Args)
		s.Env = dict(s.Name, "env", s.Env)
		s.Cwd = one(s.Name, -1, "cwd", s.Cwd)
		if s.Remote != nil {
			r := *s.Remote
			before := len(issues)
			r.URL = one(s.Name, -1, "url", r.URL)
			r.Headers = dict(s.Name, "headers", r.Headers)
			if len(issues) == before {
				if _, err := ParseRemoteURL(r.URL); err != nil {
					issues = append(issues, Unresolved{Server: s.Name, Hook: -1, Field: "url", Problem: err.Error()})
				}
				for _, k := range sortedKeys(r.Headers) {
					if err := CheckHeader(k, r.Headers[k]); err != nil {
						issues = append(issues, Unresolved{Server: s.Name, Hook: -1, Field: "headers." + k, Problem: err.Error()})
					}
				}
			}
			s.Remote = &r
		}
		out.Servers[i] = s
	}
	out.Hooks = make([]Hook, len(m.Hooks))
	for i, h := range m.Hooks {
		h.Command = one("", i, "command", h.Command)
		h.Args = list("", i, "args", h.Args)
		out.Hooks[i] = h
	}
	return &out, issues
}

// HoldsBack reports whether an unresolved reference keeps its server or hook
// from starting: a ${VAR} without a default, a required userConfig key, or a
// value refused once filled in. A declared key that is not required expands
// to nothing, as in Claude Code.
func (m *Manifest) HoldsBack(u Unresolved) bool {
	key, ok := strings.CutPrefix(u.Name, UserConfigPrefix)
	return !ok || m.UserConfig[key].Required
}

// ConfigCommand is the command that sets a plugin's value for a reference name
// ("user_config.KEY" or "KEY"; both set KEY).
func ConfigCommand(plugin, refName string) string {
	return fmt.Sprintf("oz0-node plugin config %s %s=…", plugin, strings.TrimPrefix(refName, UserConfigPrefix))
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
