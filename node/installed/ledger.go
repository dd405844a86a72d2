package installed

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"time"

	"oz0.ai/node/node/datadir"
)

// Ledger actions.
const (
	ActionInstall = "install"
	ActionUpdate  = "update"
	ActionRemove  = "remove"
)

// LedgerEntry is one line of ledger.jsonl: who did what to which plugin, from which
// repository at which commit, when, and how the node built it.
type LedgerEntry struct {
	Time        time.Time `json:"time"`
	Action      string    `json:"action"`
	Plugin      string    `json:"plugin"`
	Who         string    `json:"who"`
	Source      string    `json:"source,omitempty"`
	Marketplace string    `json:"marketplace,omitempty"`
	Ref         string    `json:"ref,omitempty"`
	Commit      string    `json:"commit,omitempty"`
	Subdir      string    `json:"subdir,omitempty"`
	// Previous is the commit that was active before (updates and removals).
	Previous string `json:"previous,omitempty"`
	Private  bool   `json:"private"`
	Mode     string `json:"mode,omitempty"`
	Tier     int    `json:"tier"`
	Build    *Build `json:"build,omitempty"`
	// Submodules, Bundles and Notes are the install record's (Meta).
	Submodules []Submodule `json:"submodules,omitempty"`
	Bundles    []Bundle    `json:"bundles,omitempty"`
	Notes      []string    `json:"notes,omitempty"`
}

// Build records what an install's build step decided and did.
type Build struct {
	PackageCode bool     `json:"package_code"`
	Reason      string   `json:"reason"`
	Steps       []string `json:"steps,omitempty"`
	Launchers   []Launch `json:"launchers,omitempty"`
}

// AppendLedger adds one entry to the ledger.
func AppendLedger(d datadir.Dir, e LedgerEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	// A crash mid-append leaves a line without its newline: start on a fresh line so
	// this entry is not glued to the torn one.
	if f, err := os.Open(d.Ledger()); err == nil {
		if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
			last := make([]byte, 1)
			if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
				b = append([]byte{'\n'}, b...)
			}
		}
		f.Close()
	}
	if err := datadir.AppendLine(d.Ledger(), b); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// ReadLedger returns the ledger's entries for plugin (all plugins when ""), oldest
// first. A line that does not parse (torn by a crash mid-append) is skipped with a
// warning naming its line number: one torn line must not hide the history.
func ReadLedger(d datadir.Dir, plugin string) ([]LedgerEntry, error) {
	f, err := os.Open(d.Ledger())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer f.Close()
	var out []LedgerEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e LedgerEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			slog.Warn("ledger line skipped: not a JSON record (torn by a crash?)", "ledger", d.Ledger(), "line", n, "err", err)
			continue
		}
		if plugin == "" || e.Plugin == plugin {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return out, nil
}

// Who names the person behind an install: by when given (--by), else the invoking
// user, with the sudo caller when there is one.
func Who(by string) string {
	if by != "" {
		return by
	}
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if s := os.Getenv("SUDO_USER"); s != "" && s != name {
		return s + " (via sudo as " + name + ")"
	}
	return name
}
