package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// ledgerAgrees fails unless the ledger closes every intent and its last
// operation of each plugin is what the records say: the active commit, or none.
func ledgerAgrees(t *testing.T, d datadir.Dir, plugins ...string) {
	t.Helper()
	h, err := installed.ReadLedgerHistory(d, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Intents) > 0 {
		t.Errorf("intents left open: %+v", h.Intents)
	}
	last := map[string]installed.LedgerEntry{}
	for _, e := range h.Entries {
		if e.Phase != installed.PhaseAbandoned {
			last[e.Plugin] = e
		}
	}
	for _, p := range plugins {
		l, inLedger := last[p]
		says := "absent"
		if inLedger && l.Action != installed.ActionRemove {
			says = l.Commit
		}
		is := "absent"
		if c, err := installed.Current(d, p); err == nil {
			is = c
		} else if !errors.Is(err, installed.ErrNotInstalled) {
			t.Fatalf("records of %s: %v", p, err)
		}
		if _, err := os.Lstat(d.Plugin(p)); errors.Is(err, fs.ErrNotExist) && is != "absent" {
			t.Fatalf("%s: current without a folder?", p)
		}
		if says != is {
			t.Errorf("plugin %s: the ledger says %s (last line %+v), the records %s", p, says, l, is)
		}
	}
}

// A process killed at any step of an install, an update or a removal (the
// ledger's intent written, the change made and its closing line not yet, or
// before either) leaves a ledger that, once the next start has looked at it
// (CleanStaging, as the node runs it), agrees with the records: every operation
// made is recorded, none that was not, and no intent stays open.
func TestKillAtEveryStepLeavesALedgerThatAgrees(t *testing.T) {
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"NEW": "second\n"})
	steps := []string{stepFetched, stepStaged, stepBuilt, stepPlaced, stepIntent, stepActivated}
	for _, op := range []string{"install", "update"} {
		for _, step := range steps {
			t.Run(op+"-"+step, func(t *testing.T) {
				d := newData(t)
				commit := c1
				if op == "update" {
					mustInstall(t, d, Options{Source: repo, Commit: c1})
					commit = c2
				}
				kill(t, startPaused(t, d, childSpec{Install: &Options{Source: repo, Commit: commit, By: "killed"}}, step))
				if err := CleanStaging(d); err != nil {
					t.Fatal(err)
				}
				ledgerAgrees(t, d, "demo")
				h, _ := installed.ReadLedgerHistory(d, "demo")
				made := step == stepActivated
				var killed []installed.LedgerEntry
				for _, e := range h.Entries {
					if e.Who == "killed" {
						killed = append(killed, e)
					}
				}
				switch {
				case made && (len(killed) != 1 || killed[0].Phase != installed.PhaseRecovered || killed[0].Commit != commit):
					t.Errorf("the install made before the kill is not recorded as recovered: %+v", killed)
				case step == stepIntent && (len(killed) != 1 || killed[0].Phase != installed.PhaseAbandoned):
					t.Errorf("the install begun and never made is not recorded as abandoned: %+v", killed)
				case !made && step != stepIntent && len(killed) != 0:
					t.Errorf("an install killed before its intent reached the ledger: %+v", killed)
				}
				// A second look changes nothing.
				before, _ := os.ReadFile(d.Ledger())
				if err := CleanStaging(d); err != nil {
					t.Fatal(err)
				}
				if after, _ := os.ReadFile(d.Ledger()); string(after) != string(before) {
					t.Error("a second reconciliation wrote to the ledger again")
				}
			})
		}
	}
	for _, step := range []string{stepRemoveIntent, stepRemoving} {
		t.Run("remove-"+step, func(t *testing.T) {
			d := newData(t)
			mustInstall(t, d, Options{Source: repo, Commit: c1})
			kill(t, startPaused(t, d, childSpec{Remove: &RemoveOptions{Name: "demo", By: "killed"}}, step))
			if err := CleanStaging(d); err != nil {
				t.Fatal(err)
			}
			ledgerAgrees(t, d, "demo")
		})
	}
}

// The closing line torn by a kill mid-append (half a line at the ledger's end):
// the reader skips it and says so, and the next start records the operation from
// the records.
func TestTornClosingLineIsRecovered(t *testing.T) {
	d := newData(t)
	repo, c1 := newRepo(t, "demo", nil)
	mustInstall(t, d, Options{Source: repo, Commit: c1})
	b, _ := os.ReadFile(d.Ledger())
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	last := lines[len(lines)-1]
	if err := os.WriteFile(d.Ledger(), []byte(strings.Join(lines[:len(lines)-1], "")+last[:len(last)/2]), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := installed.ReadLedgerHistory(d, "demo")
	if err != nil || len(h.Skipped) != 1 || !strings.Contains(h.Skipped[0], fmt.Sprintf("line %d", len(lines))) || len(h.Intents) != 1 {
		t.Fatalf("torn closing line: %+v %v", h, err)
	}
	if err := CleanStaging(d); err != nil {
		t.Fatal(err)
	}
	ledgerAgrees(t, d, "demo")
}
