package installed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/datadir"
)

func newData(t *testing.T) datadir.Dir {
	t.Helper()
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWhoNamesTheSudoCaller(t *testing.T) {
	t.Setenv("SUDO_USER", "dana")
	if w := Who(""); !strings.HasPrefix(w, "dana (via sudo as ") {
		t.Fatalf("Who = %q", w)
	}
	if w := Who("ops-bot"); w != "ops-bot" {
		t.Fatalf("Who(--by) = %q", w)
	}
}

func TestLedgerSkipsTornLastLine(t *testing.T) {
	d := newData(t)
	os.MkdirAll(d.Root, 0o700)
	AppendLedger(d, LedgerEntry{Action: ActionInstall, Plugin: "a", Commit: "abcdef1"})
	f, _ := os.OpenFile(d.Ledger(), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"action":"inst`)
	f.Close()
	es, err := ReadLedger(d, "")
	if err != nil || len(es) != 1 {
		t.Fatalf("torn line: %v %v", es, err)
	}
	// The next append starts a fresh line: both entries survive the torn one.
	AppendLedger(d, LedgerEntry{Action: ActionInstall, Plugin: "b"})
	es, err = ReadLedger(d, "")
	if err != nil || len(es) != 2 || es[1].Plugin != "b" {
		t.Fatalf("after a torn line: %+v %v", es, err)
	}
}

// A line over 1 MiB (the battery's) is read through and skipped, and said so;
// the lines before and after it are the history, never "token too long".
func TestLedgerSkipsAnOversizedLineAndSaysSo(t *testing.T) {
	d := newData(t)
	os.MkdirAll(d.Root, 0o700)
	AppendLedger(d, LedgerEntry{Action: ActionInstall, Plugin: "a", Commit: "abcdef1"})
	big := LedgerEntry{Action: ActionInstall, Plugin: "a", Commit: "abcdef2", Notes: []string{strings.Repeat("n", 3<<20)}}
	AppendLedger(d, big)
	AppendLedger(d, LedgerEntry{Action: ActionUpdate, Plugin: "a", Commit: "abcdef3"})
	h, err := ReadLedgerHistory(d, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 2 || h.Entries[0].Commit != "abcdef1" || h.Entries[1].Commit != "abcdef3" {
		t.Errorf("entries %+v", h.Entries)
	}
	if len(h.Skipped) != 1 || !strings.Contains(h.Skipped[0], "line 2") || !strings.Contains(h.Skipped[0], "over the reader's 1 MiB") {
		t.Errorf("skipped %q", h.Skipped)
	}
	if es, err := ReadLedger(d, ""); err != nil || len(es) != 2 {
		t.Errorf("ReadLedger: %d entries, %v", len(es), err)
	}
}

// An intent line is not an operation: it is listed open until a line with its
// id closes it.
func TestLedgerIntentsAreOpenUntilClosed(t *testing.T) {
	d := newData(t)
	os.MkdirAll(d.Root, 0o700)
	AppendLedger(d, LedgerEntry{Action: ActionInstall, Plugin: "a", Commit: "abcdef1", ID: "x", Phase: PhaseIntent})
	h, _ := ReadLedgerHistory(d, "")
	if len(h.Entries) != 0 || len(h.Intents) != 1 {
		t.Fatalf("after the intent: %+v", h)
	}
	AppendLedger(d, LedgerEntry{Action: ActionInstall, Plugin: "a", Commit: "abcdef1", ID: "x"})
	h, _ = ReadLedgerHistory(d, "")
	if len(h.Entries) != 1 || len(h.Intents) != 0 {
		t.Fatalf("after the closing line: %+v", h)
	}
}
