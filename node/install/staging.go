package install

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// CleanStaging removes what killed installs left in <data>/staging. It does nothing
// while an install or removal holds the lock (that one cleans up after itself and
// cleans leftovers when it starts), so it is safe to call at any time; the node
// calls it when it starts.
func CleanStaging(d datadir.Dir) error {
	if _, err := os.Stat(d.Plugins()); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	l, ok, err := tryAcquire(d)
	if err != nil {
		return err
	}
	if !ok {
		slog.Info("staging not cleaned: a plugin install or removal is running", "staging", d.Staging())
		return nil
	}
	defer l.release()
	return cleanStagingLocked(d)
}

func cleanStagingLocked(d datadir.Dir) error {
	sweepUnactivated(d)
	if err := reconcileLedger(d, slog.Default()); err != nil {
		slog.Warn("the ledger could not be reconciled with the records", "ledger", d.Ledger(), "err", err)
	}
	ents, err := os.ReadDir(d.Staging())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean staging: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(d.Staging(), e.Name())
		if err := removeAll(p); err != nil {
			errs = append(errs, fmt.Errorf("clean staging: %w", err))
		}
	}
	return errors.Join(errs...)
}

// sweepUnactivated removes commit folders an install placed but never activated
// (killed before it wrote the commit's record): without a record no one can have
// used them.
func sweepUnactivated(d datadir.Dir) {
	plugins, err := os.ReadDir(d.Plugins())
	if err != nil {
		return
	}
	for _, p := range plugins {
		if !p.IsDir() || !manifest.ValidName(p.Name()) {
			continue
		}
		dir := d.Plugin(p.Name())
		cur, _ := os.Readlink(d.Current(p.Name()))
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			c := e.Name()
			if !e.IsDir() || !installed.ValidCommit(c) || c == cur {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, c+".json")); err == nil {
				continue
			}
			tmp := filepath.Join(d.Staging(), "unactivated-"+p.Name()+"-"+c)
			if err := os.Rename(filepath.Join(dir, c), tmp); err != nil {
				slog.Warn("could not remove a commit folder that was never activated", "path", filepath.Join(dir, c), "err", err)
				continue
			}
			slog.Info("removed a commit folder an interrupted install left", "plugin", p.Name(), "commit", c)
		}
	}
}

// removeAll removes a tree even where the build left read-only folders.
func removeAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, de fs.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// newStaging makes a fresh private folder under <data>/staging.
func newStaging(d datadir.Dir) (string, error) {
	if err := os.MkdirAll(d.Staging(), 0o700); err != nil {
		return "", fmt.Errorf("create staging: %w", err)
	}
	var b [8]byte
	rand.Read(b[:])
	p := filepath.Join(d.Staging(), hex.EncodeToString(b[:]))
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", fmt.Errorf("create staging: %w", err)
	}
	return p, nil
}
