package agentsetup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"oz0.ai/node/node/datadir"
)

// Record is one setup the node keeps in step: the files of a scope and how
// that setup starts the node. `plugin install`, `update` and `remove` rewrite
// its hook entries for the plugins installed then (Sync); `setup --remove`
// forgets it.
type Record struct {
	Files
	Argv []string `json:"argv"`
}

// records is the file's shape.
type records struct {
	ClaudeCode []Record `json:"claude_code"`
}

// LoadRecords reads the setups recorded in path; none is an empty list.
func LoadRecords(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var r records
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return r.ClaudeCode, nil
}

// SaveRecord records a setup in path (replacing one of the same settings file),
// or forgets it with forget.
func SaveRecord(path string, rec Record, forget bool) error {
	all, err := LoadRecords(path)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(r Record) bool { return r.Settings == rec.Settings })
	if !forget {
		all = append(all, rec)
	}
	b, err := json.MarshalIndent(records{ClaudeCode: all}, "", "  ")
	if err != nil {
		return err
	}
	return datadir.WriteFileAtomic(path, append(b, '\n'), 0o600)
}

// Sync rewrites the hook entries of every recorded setup for regs, leaving the
// MCP files and everything else alone. It writes only a settings file that
// exists and belongs to the user it runs as (where a link leads included): the
// node never creates or takes over another's file. A record it cannot follow is
// an error in the list, not a stop.
func Sync(path string, regs []Registration) ([]Change, []error) {
	recs, err := LoadRecords(path)
	if err != nil {
		return nil, []error{err}
	}
	var out []Change
	var errs []error
	for _, r := range recs {
		real, err := filepath.EvalSymlinks(r.Settings)
		if err != nil {
			errs = append(errs, fmt.Errorf("settings %s: %w", r.Settings, err))
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			errs = append(errs, fmt.Errorf("settings %s: %w", r.Settings, err))
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			errs = append(errs, fmt.Errorf("settings %s: belongs to uid %d, not to this user (%d); left alone: run oz0-node setup claude-code as its owner", r.Settings, st.Uid, os.Geteuid()))
			continue
		}
		cs, err := Apply(r.Files, Node{Argv: r.Argv}, Options{Hooks: regs, SettingsOnly: true})
		out = append(out, cs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errs
}
