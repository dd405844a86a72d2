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
