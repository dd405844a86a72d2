package installed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	// ID pairs an operation's intent line with the line that closes it.
	ID string `json:"id,omitempty"`
	// Phase is PhaseIntent for the line written before a change, "" for the
	// line written once it is made, PhaseRecovered for a line a later start
	// wrote after finding the change made (or made without a line), and
	// PhaseAbandoned when it found the change not made.
	Phase string `json:"phase,omitempty"`
}

// Phases of a ledger line (LedgerEntry.Phase).
const (
	PhaseIntent    = "intent"
	PhaseRecovered = "recovered"
	PhaseAbandoned = "abandoned"
)

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

// maxLedgerLine bounds one ledger line the reader holds: a longer one is read
// through and skipped, never the end of the history.
const maxLedgerLine = 1 << 20

// LedgerHistory is what the ledger says of a plugin (or every plugin): its
// operations, oldest first, and the lines it could not read.
type LedgerHistory struct {
	// Entries are the operations that were made (Phase "" or recovered) and
	// those that were begun but not made (abandoned). Intent lines are not
	// listed: each is closed by one of those.
	Entries []LedgerEntry
	// Intents are the intent lines no later line closes yet (an install or
	// removal under way, or one whose process ended; the next start closes it).
	Intents []LedgerEntry
	// Skipped says which lines were not read and why (torn by a crash, too
	// long), by line number.
	Skipped []string
}

// ReadLedger returns the ledger's operations for plugin (all plugins when ""),
// oldest first. A line that does not parse (torn by a crash mid-append) or is
// over 1 MiB is skipped with a warning naming its line number: one bad line
// never hides the rest of the history (ReadLedgerHistory says which).
func ReadLedger(d datadir.Dir, plugin string) ([]LedgerEntry, error) {
	h, err := ReadLedgerHistory(d, plugin)
	return h.Entries, err
}

// ReadLedgerHistory reads the ledger for plugin (all plugins when "").
func ReadLedgerHistory(d datadir.Dir, plugin string) (LedgerHistory, error) {
	var h LedgerHistory
	f, err := os.Open(d.Ledger())
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return h, fmt.Errorf("read ledger: %w", err)
	}
	defer f.Close()
	open := map[string]int{} // intent id → index in intents
	var intents []LedgerEntry
	err = eachLine(bufio.NewReaderSize(f, 64<<10), maxLedgerLine, func(n int, line []byte, size int) {
		if size > maxLedgerLine {
			h.Skipped = append(h.Skipped, fmt.Sprintf("line %d: %d bytes, over the reader's 1 MiB; skipped", n, size))
			slog.Warn("ledger line skipped: over 1 MiB", "ledger", d.Ledger(), "line", n, "bytes", size)
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		var e LedgerEntry
		if err := json.Unmarshal(line, &e); err != nil {
			h.Skipped = append(h.Skipped, fmt.Sprintf("line %d: not a ledger record (torn by a crash?): %v; skipped", n, err))
			slog.Warn("ledger line skipped: not a JSON record (torn by a crash?)", "ledger", d.Ledger(), "line", n, "err", err)
			return
		}
		if plugin != "" && e.Plugin != plugin {
			return
		}
		if e.Phase == PhaseIntent {
			open[e.ID] = len(intents)
			intents = append(intents, e)
			return
		}
		if i, ok := open[e.ID]; ok && e.ID != "" {
			intents[i].ID = "" // closed
			delete(open, e.ID)
		}
		h.Entries = append(h.Entries, e)
	})
	if err != nil {
		return h, fmt.Errorf("read ledger: %w", err)
	}
	for _, e := range intents {
		if e.ID != "" {
			h.Intents = append(h.Intents, e)
		}
	}
	return h, nil
}

// eachLine calls fn with each line of r (numbered from 1, without its newline)
// and its length; a line longer than max is read through and given with a nil
// slice and its whole length, so it costs no more memory than max.
func eachLine(r *bufio.Reader, max int, fn func(n int, line []byte, size int)) error {
	var buf []byte
	for n := 1; ; n++ {
		buf = buf[:0]
		size, over := 0, false
		for {
			chunk, err := r.ReadSlice('\n')
			size += len(chunk)
			if !over {
				if len(buf)+len(chunk) > max+1 {
					over, buf = true, buf[:0]
				} else {
					buf = append(buf, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && err != io.EOF {
				return err
			}
			line := bytes.TrimSuffix(buf, []byte("\n"))
			if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
				size--
			}
			if over {
				line = nil
			}
			if size > 0 || err == nil {
				fn(n, line, size)
			}
			if err == io.EOF {
				return nil
			}
			break
		}
	}
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
