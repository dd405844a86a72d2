// Package installed is what is installed on the node, as the running node and the
// CLI read it: each plugin's install records and active commit, the ledger of who
// installed what, and the managed language runtimes plugins run with. Package
// install writes these (through Activate and AppendLedger); everyone else reads.
package installed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/manifest"
)

// Meta describes one installed commit of a plugin. It is written beside the commit's
// folder (plugins/<name>/<commit>.json) before `current` switches to it.
type Meta struct {
	Name        string    `json:"name"`
	Commit      string    `json:"commit"`
	Source      string    `json:"source"`
	Ref         string    `json:"ref,omitempty"`
	Subdir      string    `json:"subdir,omitempty"`
	Private     bool      `json:"private"`
	FirstParty  bool      `json:"first_party,omitempty"`
	InstalledBy string    `json:"installed_by"`
	InstalledAt time.Time `json:"installed_at"`
	Mode        string    `json:"mode,omitempty"`
	Build       string    `json:"build,omitempty"`
	// Launchers are the servers' launcher packages install resolved and pinned.
	Launchers []Launch `json:"launchers,omitempty"`
	// Submodules are the git submodules fetched with the plugin (--submodules).
	Submodules []Submodule `json:"submodules,omitempty"`
	// Bundles are the MCPB bundles install fetched and unpacked, pinned.
	Bundles []Bundle `json:"bundles,omitempty"`
	// Notes say what the install left out or could not check and the operator
	// should know: submodules left out, builds skipped because nothing runs them,
	// a runtime a server needs that the node lacks.
	Notes []string `json:"notes,omitempty"`
}

// Launch is the resolved launcher of server, or nil.
func (m *Meta) Launch(server string) *Launch {
	for i := range m.Launchers {
		if m.Launchers[i].Server == server {
			return &m.Launchers[i]
		}
	}
	return nil
}

// Plugin is a plugin as it stands on the node: its active commit and files.
type Plugin struct {
	Meta
	// Dir is the installed files of the active commit.
	Dir string `json:"dir"`
	// Unchanged is set by Install when this commit was already active (a no-op).
	Unchanged bool `json:"-"`
}

// ValidCommit reports whether s names a commit folder: 7 to 64 lowercase hex digits.
// (Checked by hand: a bounded repetition compiles to a large regexp program.)
func ValidCommit(s string) bool {
	if len(s) < 7 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ErrNotInstalled is returned by Lookup for a plugin that is not installed.
var ErrNotInstalled = errors.New("not installed")

// RecordError is a plugin whose install record cannot be read: its `current`
// link dangles or is not a link, or its record does not parse, is empty or too
// large, or names another plugin. The plugin is installed but cannot be run until
// it is reinstalled or the file is fixed; the node holds it back and says so.
type RecordError struct {
	Plugin string
	File   string // the file that could not be read
	Err    error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("plugin %s: install record %s: %v", e.Plugin, e.File, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// maxRecord bounds an install record read.
const maxRecord = 4 << 20

// Current returns the active commit of plugin name: one readlink, cheap enough to
// ask before every call.
func Current(d datadir.Dir, name string) (string, error) {
	if !manifest.ValidName(name) {
		return "", fmt.Errorf("plugin %q: not a plugin name", name)
	}
	target, err := os.Readlink(d.Current(name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("plugin %s: %w", name, ErrNotInstalled)
	}
	if err != nil {
		return "", &RecordError{Plugin: name, File: d.Current(name), Err: fmt.Errorf("read the current commit (it should be a link to a commit folder): %w", err)}
	}
	commit := filepath.Base(target)
	if target != commit || !ValidCommit(commit) {
		return "", &RecordError{Plugin: name, File: d.Current(name), Err: fmt.Errorf("points at %q, not a commit folder", target)}
	}
	return commit, nil
}

// Lookup returns the active installation of plugin name.
func Lookup(d datadir.Dir, name string) (*Plugin, error) {
	commit, err := Current(d, name)
	if err != nil {
		return nil, err
	}
	return LookupCommit(d, name, commit)
}

// LookupCommit reads the install record of one installed commit.
func LookupCommit(d datadir.Dir, name, commit string) (*Plugin, error) {
	if !manifest.ValidName(name) || !ValidCommit(commit) {
		return nil, fmt.Errorf("plugin %q at %q: not a plugin name and commit", name, commit)
	}
	path := metaPath(d, name, commit)
	bad := func(err error) (*Plugin, error) { return nil, &RecordError{Plugin: name, File: path, Err: err} }
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return bad(fmt.Errorf("missing: current names commit %s, which has no record", commit))
	}
	if err != nil {
		return bad(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	switch {
	case err != nil:
		return bad(err)
	case len(b) > maxRecord:
		return bad(fmt.Errorf("larger than %d MiB", maxRecord>>20))
	case len(bytes.TrimSpace(b)) == 0:
		return bad(errors.New("empty"))
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return bad(fmt.Errorf("does not parse: %w", err))
	}
	if m.Name != name || m.Commit != commit {
		return bad(fmt.Errorf("names %s@%s", m.Name, m.Commit))
	}
	return &Plugin{Meta: m, Dir: d.PluginCommit(name, commit)}, nil
}

// List returns every installed plugin, sorted by name. A plugin whose record cannot
// be read is returned in errs, not silently dropped.
func List(d datadir.Dir) ([]*Plugin, []error) {
	ents, err := os.ReadDir(d.Plugins())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("list plugins: %w", err)}
	}
	var out []*Plugin
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !manifest.ValidName(e.Name()) {
			continue
		}
		in, err := Lookup(d, e.Name())
		if errors.Is(err, ErrNotInstalled) {
			// A first install in progress (its record is written a moment
			// before `current`), unless `current` was lost: a record of a
			// commit whose folder is in place and no link naming any.
			if c := recordedCommit(d, e.Name()); c != "" {
				errs = append(errs, &RecordError{Plugin: e.Name(), File: d.Current(e.Name()),
					Err: fmt.Errorf("missing, while commit %s is installed and recorded beside it", c)})
			}
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errs
}

// recordedCommit is a commit of plugin name whose folder and record are both in
// place ("" when none is), and that a first install's record written just now
// does not explain: its record is older than a minute.
func recordedCommit(d datadir.Dir, name string) string {
	ents, _ := os.ReadDir(d.Plugin(name))
	for _, e := range ents {
		c, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidCommit(c) {
			continue
		}
		fi, err := os.Stat(filepath.Join(d.Plugin(name), e.Name()))
		if err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if st, err := os.Stat(d.PluginCommit(name, c)); err == nil && st.IsDir() {
			return c
		}
	}
	return ""
}

func metaPath(d datadir.Dir, name, commit string) string {
	return filepath.Join(d.Plugin(name), commit+".json")
}

// Activate makes an installed commit the active one: it writes the commit's record,
// then replaces the `current` symlink by rename, so a reader sees the old commit or
// the new one, never neither. The commit's files must already be in place.
func Activate(d datadir.Dir, m Meta) error {
	if !manifest.ValidName(m.Name) || !ValidCommit(m.Commit) {
		return fmt.Errorf("activate %s@%s: bad plugin name or commit", m.Name, m.Commit)
	}
	dir := d.PluginCommit(m.Name, m.Commit)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("activate %s@%s: files not in place at %s", m.Name, m.Commit, dir)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("activate %s: %w", m.Name, err)
	}
	if err := datadir.WriteFileAtomic(metaPath(d, m.Name, m.Commit), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("activate %s: %w", m.Name, err)
	}
	tmp := d.Current(m.Name) + ".tmp"
	os.Remove(tmp)
	if err := os.Symlink(m.Commit, tmp); err != nil {
		return fmt.Errorf("activate %s: %w", m.Name, err)
	}
	if err := os.Rename(tmp, d.Current(m.Name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("activate %s: switch current: %w", m.Name, err)
	}
	return datadir.SyncDir(d.Plugin(m.Name))
}

// Submodule is a git submodule an install fetched (--submodules) at the commit
// the plugin's tree pins.
type Submodule struct {
	Path   string `json:"path"`
	URL    string `json:"url"`
	Commit string `json:"commit"`
}

// Bundle is an MCPB bundle an install fetched (or read from the plugin) and
// unpacked into the plugin's tree, pinned by its SHA-256.
type Bundle struct {
	// Source is its URL (credentials never appear) or its path in the plugin.
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Dir is where it is unpacked, relative to the plugin's folder.
	Dir string `json:"dir"`
	// Name, Version and Type are its manifest's (server.type: node, python or
	// binary); Server is the server it gives the plugin.
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Type    string `json:"type"`
	Server  string `json:"server"`
}

// Bundle is the recorded bundle fetched from source, or nil.
func (m *Meta) Bundle(source string) *Bundle {
	for i := range m.Bundles {
		if m.Bundles[i].Source == source {
			return &m.Bundles[i]
		}
	}
	return nil
}
