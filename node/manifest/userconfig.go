package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// UserConfigOption is one value a plugin asks the operator for (Claude Code's
// userConfig, the MCPB user_config schema). Values are set with
// `oz0-node plugin config` and referenced as ${user_config.KEY}.
type UserConfigOption struct {
	Key         string `json:"key"`
	Type        string `json:"type"` // one of UserConfigTypes
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	// Sensitive values are never shown (status, logs, plugin show).
	Sensitive bool `json:"sensitive,omitempty"`
	Required  bool `json:"required,omitempty"`
	// Multiple: the value is a list (string, directory and file types only).
	Multiple bool `json:"multiple,omitempty"`
	// Default as written (a string, number, boolean or list), or nil.
	Default any `json:"default,omitempty"`
	// Min and Max bound a number.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// UserConfigTypes are the value types an option may declare.
var UserConfigTypes = []string{"string", "number", "boolean", "directory", "file"}

// DefaultText is the default as it expands in a string: a list joins with ",".
func (o *UserConfigOption) DefaultText() (string, bool) {
	switch d := o.Default.(type) {
	case nil:
		return "", false
	case []any:
		parts := make([]string, len(d))
		for i, x := range d {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, ","), true
	default:
		return fmt.Sprint(d), true
	}
}

// NeedsValue reports whether the operator must set the option before the plugin
// can use it: it is required and has no default.
func (o *UserConfigOption) NeedsValue() bool { return o.Required && o.Default == nil }

// Sensitive reports whether a reference name ("user_config.KEY") is a declared
// sensitive option, whose value must never be shown.
func (m *Manifest) Sensitive(name string) bool {
	key, ok := strings.CutPrefix(name, UserConfigPrefix)
	return ok && m.UserConfig[key].Sensitive
}

// UserConfigKeys returns the declared keys, sorted.
func (m *Manifest) UserConfigKeys() []string {
	keys := make([]string, 0, len(m.UserConfig))
	for k := range m.UserConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var secretKeyRE = lazyre.New(`(?i)(token|secret|password|passwd|api_?key|credential|private_?key)`)

func (l *loader) userConfig(top map[string]any) {
	if v, ok := top["userConfig"]; ok {
		l.userConfigFrom(l.m.File, "userConfig", v)
	}
}

// userConfigFrom reads an object of options (field of file) into the manifest's
// userConfig: the plugin's own, or an MCPB bundle's user_config (the same
// schema). A key declared twice is an error.
func (l *loader) userConfigFrom(file, field string, v any) {
	w := walker{c: l.c, file: file}
	o, ok := v.(map[string]any)
	if !ok {
		w.typeErr(field, "an object of options")
		return
	}
	if l.m.UserConfig == nil {
		l.m.UserConfig = map[string]UserConfigOption{}
	}
	for _, key := range sortedAnyKeys(o) {
		ov := o[key]
		base := field + "." + key
		if _, dup := l.m.UserConfig[key]; dup {
			l.c.add(file, base, "the option %s is declared twice (by the plugin and by a bundle, or by two bundles)", key)
			continue
		}
		if !configKeyRE.MatchString(key) {
			l.c.add(file, base, "a userConfig key is letters, digits and '_' (it is referenced as ${user_config.KEY})")
			continue
		}
		om, ok := ov.(map[string]any)
		if !ok {
			w.typeErr(base, "an object {type, title, description…}")
			continue
		}
		w.unknownKeys(om, base, "type", "title", "description", "sensitive", "required", "default", "multiple", "min", "max")
		opt := UserConfigOption{Key: key, Type: w.strAt(om, base, "type", true), Title: w.strAt(om, base, "title", true),
			Description: w.strAt(om, base, "description", false)}
		if opt.Type != "" && !slices.Contains(UserConfigTypes, opt.Type) {
			l.c.add(file, base+".type", "%q: must be one of %s", opt.Type, strings.Join(UserConfigTypes, ", "))
		}
		flag := func(k string) bool {
			fv, ok := om[k]
			if !ok {
				return false
			}
			b, ok := fv.(bool)
			if !ok {
				w.typeErr(base+"."+k, "true or false")
			}
			return b
		}
		opt.Sensitive, opt.Required, opt.Multiple = flag("sensitive"), flag("required"), flag("multiple")
		if opt.Multiple && (opt.Type == "number" || opt.Type == "boolean") {
			l.c.add(file, base+".multiple", "only string, directory and file options take several values")
		}
		num := func(k string) *float64 {
			nv, ok := om[k]
			if !ok {
				return nil
			}
			n, isNum := nv.(json.Number)
			f, err := n.Float64()
			if !isNum || err != nil {
				w.typeErr(base+"."+k, "a number")
				return nil
			}
			if opt.Type != "number" {
				l.c.add(file, base+"."+k, "only a number option has a %s", k)
			}
			return &f
		}
		opt.Min, opt.Max = num("min"), num("max")
		if opt.Min != nil && opt.Max != nil && *opt.Min > *opt.Max {
			l.c.add(file, base+".max", "is below min")
		}
		if dv, ok := om["default"]; ok && opt.Type != "" {
			if err := opt.checkValue(dv); err != nil {
				l.c.add(file, base+".default", "%v", err)
			} else {
				opt.Default = plainJSON(dv)
			}
		}
		if opt.Sensitive && opt.Default != nil {
			l.notice(file, base+".default", "a default of a sensitive option is public in the manifest")
		}
		if !opt.Sensitive && secretKeyRE.MatchString(key) {
			l.notice(file, base+".sensitive", "%q looks like a secret but is not marked sensitive: its value would be shown in status and plugin show", key)
		}
		l.m.UserConfig[key] = opt
	}
}

// checkValue checks a default (or a value the operator sets, decoded from JSON
// with UseNumber) against the option's type, list-ness and bounds.
func (o *UserConfigOption) checkValue(v any) error {
	if o.Multiple {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("must be a list of %s values", o.Type)
		}
		for _, x := range list {
			one := *o
			one.Multiple = false
			if err := one.checkValue(x); err != nil {
				return err
			}
		}
		return nil
	}
	switch o.Type {
	case "number":
		n, ok := v.(json.Number)
		f, err := n.Float64()
		if !ok || err != nil {
			return fmt.Errorf("must be a number")
		}
		if o.Min != nil && f < *o.Min || o.Max != nil && f > *o.Max {
			return fmt.Errorf("%s is outside the option's min and max", n)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("must be true or false")
		}
	default:
		s, ok := v.(string)
		if !ok || strings.ContainsRune(s, 0) {
			return fmt.Errorf("must be a string")
		}
	}
	return nil
}

// plainJSON turns json.Number into float64 so the value marshals and prints as
// the number it is.
func plainJSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = plainJSON(x)
		}
		return out
	}
	return v
}

// CheckText checks a value the operator sets as text: a number option takes a
// number, a boolean one true or false, and a list (multiple) is comma-separated,
// as a default list expands.
func (o *UserConfigOption) CheckText(s string) error {
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("a value holds no NUL byte")
	}
	var v any = s
	switch o.Type {
	case "number":
		v = json.Number(strings.TrimSpace(s))
		if _, err := v.(json.Number).Float64(); err != nil {
			return fmt.Errorf("%q: must be a number", s)
		}
	case "boolean":
		switch s {
		case "true":
			v = true
		case "false":
			v = false
		default:
			return fmt.Errorf("%q: must be true or false", s)
		}
	}
	if o.Multiple {
		parts := strings.Split(s, ",")
		list := make([]any, len(parts))
		for i, p := range parts {
			list[i] = p
		}
		v = list
	}
	return o.checkValue(v)
}
