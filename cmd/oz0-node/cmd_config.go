package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/userconf"
)

// configKeyRE is what a key may be: a userConfig key or a ${VAR} name.
var configKeyRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

// configEntry is one key as `plugin config` shows it. A secret's value is never
// shown, only whether it is set.
type configEntry struct {
	Key         string `json:"key"`
	Declared    bool   `json:"declared"` // in the manifest's userConfig
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Type        string `json:"type,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Sensitive   bool   `json:"sensitive"` // the value is shown redacted
	Set         bool   `json:"set"`
	Value       string `json:"value,omitempty"`
	Default     string `json:"default,omitempty"`
	// Missing is true when a server or hook does not start for lack of it.
	Missing bool `json:"missing,omitempty"`
	// MarkedBy is who made the value a secret, which tools then hold only as a
	// sentinel (docs/promises.md §17): operator, manifest or sensitive; plain
	// when the operator hands it over as it is.
	MarkedBy string `json:"marked_by,omitempty"`
}

type configResult struct {
	Plugin  string        `json:"plugin"`
	File    string        `json:"file"`
	Keys    []configEntry `json:"keys"`
	Changed []string      `json:"changed,omitempty"`
	Note    string        `json:"note,omitempty"`
}

func newPluginConfigCmd(g *globals) *cobra.Command {
	var unset, secret, plain []string
	var asJSON bool
	c := &cobra.Command{
		Use:   "config NAME [KEY=VALUE…] [--unset KEY] [--json]",
		Short: "Show or set the operator's values for a plugin (userConfig keys and ${VAR}s)",
		Long: `Show or set the values a plugin's manifest asks for: its userConfig keys (referenced
as ${user_config.KEY}) and any ${VAR} its servers use. Values are the operator's: they
are stored private (0600) per plugin in the data folder and never taken from the node's
own environment. Sensitive values, and every ${VAR} value, are never shown.
A server that was held back for a missing value starts once it is set; a running
server takes a changed value on its next start (oz0-node restart PLUGIN/SERVER).

Secrets stay outside the sandbox: a value marked secret (a userConfig key marked
sensitive, a key the manifest binds under extensions."ai.oz0".secrets, or one
named here with --secret) reaches a sandboxed tool only as a sentinel; the node's
egress proxy puts the value in on requests to the hosts it is bound to, and
refuses the sentinel anywhere else. A secret's new value applies at the proxy at
once, no restart. --plain hands a value to the tool as it is (a database
password the tool uses itself, say): the operator's choice, shown in status.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := g.dir()
			if err != nil {
				return err
			}
			name := args[0]
			in, err := installed.Lookup(d, name)
			if err != nil {
				return err
			}
			m, err := manifest.Load(in.Dir, manifest.Options{FirstParty: in.FirstParty})
			if err != nil {
				return fmt.Errorf("plugin %s: manifest: %w", name, err)
			}
			conf, err := userconf.LoadConfig(d, name)
			if err != nil {
				return err
			}
			vals := conf.Values
			var changed []string
			set := func(kv string) (string, error) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || !configKeyRE.MatchString(k) {
					return "", usagef("%q: give KEY=VALUE (KEY is letters, digits and '_')", kv)
				}
				if o, declared := m.UserConfig[k]; declared {
					if err := o.CheckText(v); err != nil {
						return "", usagef("%s: %v", k, err)
					}
				}
				vals[k] = v
				changed = append(changed, k)
				return k, nil
			}
			for _, kv := range args[1:] {
				if _, err := set(kv); err != nil {
					return err
				}
			}
			// --secret KEY[=VALUE] and --plain KEY[=VALUE] mark the key (and set it).
			mark := func(list []string, add, drop *[]string) error {
				for _, kv := range list {
					k := kv
					if strings.Contains(kv, "=") {
						var err error
						if k, err = set(kv); err != nil {
							return err
						}
					} else if !configKeyRE.MatchString(k) {
						return usagef("%q: give KEY or KEY=VALUE (KEY is letters, digits and '_')", kv)
					}
					*drop = slices.DeleteFunc(*drop, func(x string) bool { return x == k })
					if !slices.Contains(*add, k) {
						*add = append(*add, k)
					}
					if !slices.Contains(changed, k) {
						changed = append(changed, k)
					}
				}
				return nil
			}
			if err := mark(secret, &conf.Secret, &conf.Plain); err != nil {
				return err
			}
			if err := mark(plain, &conf.Plain, &conf.Secret); err != nil {
				return err
			}
			for _, k := range unset {
				_, had := vals[k]
				marked := slices.Contains(conf.Secret, k) || slices.Contains(conf.Plain, k)
				if had || marked {
					delete(vals, k)
					conf.Secret = slices.DeleteFunc(conf.Secret, func(x string) bool { return x == k })
					conf.Plain = slices.DeleteFunc(conf.Plain, func(x string) bool { return x == k })
					changed = append(changed, k)
				}
			}
			if len(changed) > 0 {
				conf.Values = vals
				if err := userconf.SaveConfig(d, name, conf); err != nil {
					return err
				}
			}
			res := configResult{Plugin: name, File: userconf.File(d, name), Keys: configEntries(m, conf, in.Dir, d.Home(name)), Changed: changed}
			if len(changed) > 0 {
				res.Note = "saved; a server held back for a missing value starts now; a secret's new value applies at the egress proxy at once; a running server takes any other change on its next start (oz0-node restart " + name + "/SERVER)"
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			printConfig(cmd.OutOrStdout(), res)
			return nil
		},
	}
	c.Flags().StringArrayVar(&unset, "unset", nil, "remove a value (and its mark); repeatable")
	c.Flags().StringArrayVar(&secret, "secret", nil, "KEY or KEY=VALUE: keep the value a secret, which tools hold only as a sentinel; repeatable")
	c.Flags().StringArrayVar(&plain, "plain", nil, "KEY or KEY=VALUE: hand the value to tools as it is, though it would be a secret; repeatable")
	c.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return c
}

// configEntries lists the declared keys and every other name the plugin's
// servers and hooks reference, with what is set (secrets redacted).
func configEntries(m *manifest.Manifest, conf userconf.Config, root, home string) []configEntry {
	vals := conf.Values
	_, unresolved := m.ExpandAll(manifest.Vars{Root: root, Data: home}, vals.Lookup)
	missing := map[string]bool{}
	for _, u := range unresolved {
		if u.Name != "" {
			missing[strings.TrimPrefix(u.Name, manifest.UserConfigPrefix)] = true
		}
	}
	byKey := map[string]*configEntry{}
	for _, k := range m.UserConfigKeys() {
		o := m.UserConfig[k]
		e := &configEntry{Key: k, Declared: true, Title: o.Title, Description: o.Description, Type: o.Type,
			Required: o.Required, Sensitive: o.Sensitive}
		if dt, ok := o.DefaultText(); ok {
			e.Default = dt
		}
		e.Missing = missing[k] && o.Required
		byKey[k] = e
	}
	for _, name := range referencedNames(m) {
		k := strings.TrimPrefix(name, manifest.UserConfigPrefix)
		if _, ok := byKey[k]; !ok {
			byKey[k] = &configEntry{Key: k, Sensitive: true, Missing: missing[k]}
		}
	}
	for _, k := range append(append(vals.Keys(), conf.Secret...), append(conf.Plain, m.SecretKeys()...)...) {
		if _, ok := byKey[k]; !ok {
			byKey[k] = &configEntry{Key: k, Sensitive: true}
		}
	}
	for k, e := range byKey {
		e.MarkedBy = conf.SecretBy(m, k)
		if e.MarkedBy != "" && e.MarkedBy != "plain" {
			e.Sensitive = true
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]configEntry, 0, len(keys))
	for _, k := range keys {
		e := byKey[k]
		if v, ok := vals[k]; ok {
			e.Set = true
			e.Value = v
			if e.Sensitive {
				e.Value = plan.Redacted
			}
		}
		out = append(out, *e)
	}
	return out
}

// referencedNames are the ${…} names the servers and hooks use, other than the
// node's own placeholders and ${HOME}.
func referencedNames(m *manifest.Manifest) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		refs, _ := manifest.Refs(s)
		for _, r := range refs {
			if r.Name == "HOME" || seen[r.Name] || isPlaceholder(r.Name) {
				continue
			}
			seen[r.Name] = true
			out = append(out, r.Name)
		}
	}
	for _, s := range m.Servers {
		add(s.Command)
		add(s.Cwd)
		for _, a := range s.Args {
			add(a)
		}
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
		// A hook's other ${…} belong to its shell; only userConfig keys are ours.
		refs, _ := manifest.Refs(h.Command)
		for _, r := range refs {
			if _, ok := r.UserConfigKey(); ok && !seen[r.Name] {
				seen[r.Name] = true
				out = append(out, r.Name)
			}
		}
	}
	return out
}

func isPlaceholder(name string) bool {
	for _, p := range manifest.Placeholders {
		if p == name {
			return true
		}
	}
	return false
}

func printConfig(w io.Writer, r configResult) {
	printf(w, "%s: values in %s\n", r.Plugin, r.File)
	if len(r.Keys) == 0 {
		printf(w, "  the plugin asks for no values\n")
	}
	for _, e := range r.Keys {
		state := "not set"
		switch {
		case e.Set:
			state = "= " + e.Value
		case e.Default != "":
			state = "not set (default " + e.Default + ")"
		}
		if e.Missing {
			state += " — needed: " + policy.ConfigCommand(r.Plugin, e.Key)
		}
		var tags []string
		if e.Type != "" {
			tags = append(tags, e.Type)
		}
		if e.Required {
			tags = append(tags, "required")
		}
		switch {
		case e.MarkedBy == "plain":
			tags = append(tags, "sensitive", "handed to tools plain")
		case e.MarkedBy != "":
			tags = append(tags, "secret: tools hold a sentinel")
		case e.Sensitive:
			tags = append(tags, "sensitive")
		}
		if !e.Declared {
			tags = append(tags, "${"+e.Key+"}")
		}
		printf(w, "  %s (%s) %s\n", e.Key, strings.Join(tags, ", "), state)
		if e.Title != "" || e.Description != "" {
			printf(w, "    %s %s\n", e.Title, e.Description)
		}
	}
	if r.Note != "" {
		printf(w, "%s\n", r.Note)
	}
}
