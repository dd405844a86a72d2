// Package userconf keeps the operator's values for a plugin's ${VAR} and
// ${user_config.KEY} references: one private file per plugin in the data folder,
// set with `oz0-node plugin config`. The node's own environment is never a source.
package userconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// Load reads a plugin's values; none set is an empty set, not an error.
func Load(d datadir.Dir, plugin string) (Values, error) {
	if err := checkName(plugin); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(File(d, plugin))
	if errors.Is(err, fs.ErrNotExist) {
		return Values{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin %s: read config: %w", plugin, err)
	}
	v := Values{}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("plugin %s: config %s: %w", plugin, File(d, plugin), err)
	}
	return v, nil
}

// Save writes a plugin's values atomically: the folder 0700, the file 0600. An
// empty set removes the file.
func Save(d datadir.Dir, plugin string, v Values) error {
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
	if len(v) == 0 {
		if err := os.Remove(File(d, plugin)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("plugin %s: remove config: %w", plugin, err)
		}
		return nil
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
