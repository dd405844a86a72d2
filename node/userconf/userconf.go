// Package userconf keeps the operator's values for a plugin's ${VAR} and
// ${user_config.KEY} references: one private file per plugin in the data folder,
// set with `oz0-node plugin config`. The node's own environment is never a source.
package userconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/manifest"
)

// Values are one plugin's values by key: a userConfig key (referenced as
// ${user_config.KEY}) or a variable name (referenced as ${KEY}).
type Values map[string]string

// Folder is <data>/config, private to the node's user.
func Folder(d datadir.Dir) string { return filepath.Join(d.Root, "config") }

// File is where a plugin's values live.
func File(d datadir.Dir, plugin string) string {
	return filepath.Join(Folder(d), plugin+".json")
}

// maxFile bounds a values file read.
const maxFile = 4 << 20

// Config is one plugin's file: its values and how the operator marked keys. A
// file of values alone keeps the first layout, a flat object of strings; once a
// key is marked it is this object.
type Config struct {
	Values Values `json:"values"`
	// Secret are keys the operator named secrets (plugin config --secret): their
	// values reach tools only as sentinels, put in by the egress proxy on the
	// hosts they are bound to (docs/promises.md §17).
	Secret []string `json:"secret,omitempty"`
	// Plain are keys the operator hands tools as they are (plugin config
	// --plain), though the manifest would keep them secret.
	Plain []string `json:"plain,omitempty"`
}

// Load reads a plugin's values; none set is an empty set, not an error.
func Load(d datadir.Dir, plugin string) (Values, error) {
	c, err := LoadConfig(d, plugin)
	return c.Values, err
}

// LoadConfig reads a plugin's values and marks; none set is an empty Config.
func LoadConfig(d datadir.Dir, plugin string) (Config, error) {
	if err := checkName(plugin); err != nil {
		return Config{}, err
	}
	f, err := os.Open(File(d, plugin))
	if errors.Is(err, fs.ErrNotExist) {
		return Config{Values: Values{}}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("plugin %s: read config: %w", plugin, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err == nil && len(b) > maxFile {
		err = fmt.Errorf("larger than %d MiB", maxFile>>20)
	}
	if err != nil {
		return Config{}, fmt.Errorf("plugin %s: read config %s: %w", plugin, File(d, plugin), err)
	}
	v := Values{}
	if err := json.Unmarshal(b, &v); err == nil {
		return Config{Values: v}, nil
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("plugin %s: config %s: %w", plugin, File(d, plugin), err)
	}
	if c.Values == nil {
		c.Values = Values{}
	}
	return c, nil
}

// Save writes a plugin's values, keeping its marks.
func Save(d datadir.Dir, plugin string, v Values) error {
	c, err := LoadConfig(d, plugin)
	if err != nil {
		c = Config{}
	}
	c.Values = v
	return SaveConfig(d, plugin, c)
}

// SaveConfig writes a plugin's values and marks atomically: the folder 0700, the
// file 0600. Nothing set removes the file.
func SaveConfig(d datadir.Dir, plugin string, c Config) error {
	if err := checkName(plugin); err != nil {
		return err
	}
	dir := Folder(d)
	if err := os.MkdirAll(dir, datadir.ModePrivate); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, datadir.ModePrivate); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	c.Secret, c.Plain = sortedSet(c.Secret), sortedSet(c.Plain)
	if len(c.Values) == 0 && len(c.Secret) == 0 && len(c.Plain) == 0 {
		if err := os.Remove(File(d, plugin)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("plugin %s: remove config: %w", plugin, err)
		}
		return nil
	}
	var v any = c.Values
	if len(c.Secret) > 0 || len(c.Plain) > 0 {
		if c.Values == nil {
			c.Values = Values{}
		}
		v = c
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(File(d, plugin), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("plugin %s: write config: %w", plugin, err)
	}
	return nil
}

func sortedSet(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

// IsSecret reports whether the value of key reaches tools only as a sentinel:
// a key the operator named secret, a userConfig key marked sensitive, or one the
// manifest binds under extensions."ai.oz0".secrets — unless the operator hands
// it over plain.
func (c Config) IsSecret(m *manifest.Manifest, key string) bool {
	key = strings.TrimPrefix(key, manifest.UserConfigPrefix)
	switch {
	case slices.Contains(c.Plain, key):
		return false
	case slices.Contains(c.Secret, key):
		return true
	}
	if _, ok := m.Secrets[key]; ok {
		return true
	}
	return m.UserConfig[key].Sensitive
}

// SecretBy says who made key a secret: "operator", "manifest" (bound under
// extensions."ai.oz0".secrets) or "sensitive" (userConfig); "" when it is not
// one, "plain" when the operator handed it over plain instead.
func (c Config) SecretBy(m *manifest.Manifest, key string) string {
	key = strings.TrimPrefix(key, manifest.UserConfigPrefix)
	would := ""
	switch {
	case slices.Contains(c.Secret, key):
		would = "operator"
	case hasKey(m.Secrets, key):
		would = "manifest"
	case m.UserConfig[key].Sensitive:
		would = "sensitive"
	}
	if would != "" && slices.Contains(c.Plain, key) {
		return "plain"
	}
	return would
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// Lookup resolves a reference name: "user_config.KEY" and "KEY" both read KEY.
func (v Values) Lookup(name string) (string, bool) {
	name = strings.TrimPrefix(name, manifest.UserConfigPrefix)
	val, ok := v[name]
	return val, ok
}

// Keys returns the keys set, sorted.
func (v Values) Keys() []string {
	out := make([]string, 0, len(v))
	for k := range v {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Public reports whether the value of a reference may be shown: only a declared
// userConfig key not marked sensitive. Any other operator value (a ${TOKEN} in a
// header, say) is treated as a secret.
func Public(m *manifest.Manifest, refName string) bool {
	key, ok := strings.CutPrefix(refName, manifest.UserConfigPrefix)
	if !ok {
		if o, declared := m.UserConfig[refName]; declared {
			return !o.Sensitive
		}
		return false
	}
	o, declared := m.UserConfig[key]
	return declared && !o.Sensitive
}

// checkName keeps a plugin name a single path element.
func checkName(plugin string) error {
	if plugin == "" || plugin == "." || plugin == ".." || strings.ContainsAny(plugin, `/\`) || strings.ContainsRune(plugin, 0) {
		return fmt.Errorf("plugin name %q: not a plugin name", plugin)
	}
	return nil
}
