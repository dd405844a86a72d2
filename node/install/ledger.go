package install

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// The ledger is written ahead: an intent line before an install, update or
// removal changes anything, and the operation's line once it is made (both with
// one id). A process killed between the two leaves an intent that the next holder
// of the install lock (an install, a removal, or the node at start) closes after
// looking at the records: a recovered line when the change was made, an abandoned
// one when it was not. The same look also records any change the records show and
// the ledger does not (a data folder written by an older version), so after it
// the ledger agrees with what is installed (docs/operators.md, "Plugins").

// newLedgerID is a fresh id pairing an intent with its closing line.
func newLedgerID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeIntent appends the intent line of e (given a fresh id, which e keeps for
// its closing line). Nothing has changed yet: an error stops the operation.
func writeIntent(d datadir.Dir, e *installed.LedgerEntry) error {
	e.ID = newLedgerID()
	intent := *e
	intent.Phase = installed.PhaseIntent
	if err := installed.AppendLedger(d, intent); err != nil {
		return fmt.Errorf("plugin %s: nothing changed: %w", e.Plugin, err)
	}
	return nil
}

// reconcileLedger closes the intents no line closed and records what the records
// show and the ledger does not. The install lock is held.
func reconcileLedger(d datadir.Dir, log *slog.Logger) error {
	if fi, err := os.Lstat(d.Ledger()); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// The node writes its ledger, never through a link: the link goes
		// aside (what it leads to, if anything, is left as it is) and the
		// records make the new ledger's first lines.
		aside := fmt.Sprintf("%s.link-%d", d.Ledger(), time.Now().Unix())
		if err := os.Rename(d.Ledger(), aside); err != nil {
			return fmt.Errorf("ledger %s is a symlink and could not be moved aside: %w", d.Ledger(), err)
		}
		log.Warn("the ledger was a symlink; moved aside, a new ledger is recorded from the install records", "ledger", d.Ledger(), "aside", aside)
	}
	h, err := installed.ReadLedgerHistory(d, "")
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	var errs []error
	add := func(e installed.LedgerEntry, why string) {
		e.Time = now
		e.Notes = append(e.Notes, why)
		if err := installed.AppendLedger(d, e); err != nil {
			errs = append(errs, err)
			return
		}
		log.Warn("ledger reconciled with the records", "plugin", e.Plugin, "action", e.Action, "phase", e.Phase, "why", why)
		if e.Phase != installed.PhaseAbandoned {
			h.Entries = append(h.Entries, e)
		}
	}
	for _, in := range h.Intents {
		made := false
		switch in.Action {
		case installed.ActionRemove:
			_, err := os.Lstat(d.Plugin(in.Plugin))
			made = errors.Is(err, fs.ErrNotExist)
		default:
			cur, err := installed.Current(d, in.Plugin)
			made = err == nil && cur == in.Commit
		}
		e := in
		if made {
			e.Phase = installed.PhaseRecovered
			add(e, fmt.Sprintf("recovered at %s: the %s was made but the process that made it ended before it wrote this line", now.Format(time.RFC3339), in.Action))
		} else {
			e.Phase = installed.PhaseAbandoned
			add(e, fmt.Sprintf("abandoned: the %s begun at %s was never made (its process ended first); nothing of it is in use", in.Action, in.Time.Format(time.RFC3339)))
		}
	}

	// What the ledger says is installed, per plugin: its last operation.
	last := map[string]installed.LedgerEntry{}
	for _, e := range h.Entries {
		if e.Phase != installed.PhaseAbandoned {
			last[e.Plugin] = e
		}
	}
	all, _ := installed.List(d)
	on := map[string]bool{}
	for _, in := range all {
		on[in.Name] = true
		l, ok := last[in.Name]
		if ok && l.Action != installed.ActionRemove && l.Commit == in.Commit {
			continue
		}
		e := installed.LedgerEntry{Action: installed.ActionInstall, Plugin: in.Name, Who: in.InstalledBy, Source: in.Source,
			Ref: in.Ref, Commit: in.Commit, Subdir: in.Subdir, Private: in.Private, Mode: in.Mode,
			Submodules: in.Submodules, Bundles: in.Bundles, Notes: append([]string(nil), in.Notes...),
			ID: newLedgerID(), Phase: installed.PhaseRecovered}
		if ok && l.Action != installed.ActionRemove {
			e.Action, e.Previous = installed.ActionUpdate, l.Commit
		}
		add(e, fmt.Sprintf("recovered at %s from the install record (installed %s by %s): no ledger line recorded it", now.Format(time.RFC3339), in.InstalledAt.UTC().Format(time.RFC3339), in.InstalledBy))
	}
	for name, l := range last {
		if l.Action == installed.ActionRemove || on[name] {
			continue
		}
		if _, err := os.Lstat(d.Plugin(name)); !errors.Is(err, fs.ErrNotExist) {
			continue // there, but unreadable: the node holds it back and says so
		}
		add(installed.LedgerEntry{Action: installed.ActionRemove, Plugin: name, Who: "unknown", Source: l.Source,
			Previous: l.Commit, Private: l.Private, ID: newLedgerID(), Phase: installed.PhaseRecovered},
			fmt.Sprintf("recovered at %s: the plugin's folder is gone and no ledger line recorded its removal", now.Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}
