package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// RemoveOptions say which plugin to remove and who asks.
type RemoveOptions struct {
	Name string
	By   string
	Log  *slog.Logger

	// afterStep, when set, is called as the removal passes each step (steps.go):
	// the kill tests stop a child there. Only this package's tests set it.
	afterStep func(step string)
}

// Remove takes a plugin off the node: its installed commits and its home are moved
// into staging with one rename each (so nothing half-removed stays in place), the
// removal is recorded in the ledger, then the files are deleted. Stopping the
// plugin's servers is the running node's job: it reconciles against what is
// installed. It returns the installation that was active, if any was readable.
func Remove(ctx context.Context, d datadir.Dir, o RemoveOptions) (*installed.Plugin, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if !manifest.ValidName(o.Name) {
		return nil, fmt.Errorf("plugin %q: not a plugin name", o.Name)
	}
	if _, err := os.Stat(d.Plugin(o.Name)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("plugin %s: %w", o.Name, installed.ErrNotInstalled)
	}
	l, err := acquire(ctx, d, log)
	if err != nil {
		return nil, err
	}
	defer l.release()
	if err := cleanStagingLocked(d); err != nil {
		log.Warn("leftovers of an earlier install could not be cleaned", "err", err)
	}
	cur, err := installed.Lookup(d, o.Name)
	if errors.Is(err, installed.ErrNotInstalled) {
		cur = nil
		if _, serr := os.Stat(d.Plugin(o.Name)); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("plugin %s: %w", o.Name, installed.ErrNotInstalled)
		}
	} else if err != nil {
		log.Warn("removing a plugin whose install record cannot be read", "plugin", o.Name, "err", err)
		cur = nil
	}
	st, err := newStaging(d)
	if err != nil {
		return nil, err
	}
	defer removeAll(st)
	e := installed.LedgerEntry{Time: time.Now().UTC(), Action: installed.ActionRemove, Plugin: o.Name, Who: installed.Who(o.By)}
	if cur != nil {
		e.Source, e.Ref, e.Subdir, e.Private, e.Previous = cur.Source, cur.Ref, cur.Subdir, cur.Private, cur.Commit
	}
	// Written ahead: a kill from here on leaves a line the next start closes.
	if err := writeIntent(d, &e); err != nil {
		return nil, err
	}
	reached(o.afterStep, stepRemoveIntent)
	if err := os.Rename(d.Plugin(o.Name), filepath.Join(st, "plugin")); err != nil {
		return nil, fmt.Errorf("plugin %s: remove %s: %w", o.Name, d.Plugin(o.Name), err)
	}
	if err := os.Rename(d.Home(o.Name), filepath.Join(st, "home")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("plugin %s: files removed, but its home %s: %w", o.Name, d.Home(o.Name), err)
	}
	if err := os.Rename(d.HookHome(o.Name), filepath.Join(st, "hook-home")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("plugin %s: files removed, but its hooks' home %s: %w", o.Name, d.HookHome(o.Name), err)
	}
	// Its writable views (datadir.View) go with its files.
	for i, v := range []string{filepath.Dir(d.View(o.Name, "x")), filepath.Dir(d.HookView(o.Name, "x"))} {
		if err := os.Rename(v, filepath.Join(st, fmt.Sprintf("view-%d", i))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("plugin %s: files removed, but its view %s: %w", o.Name, v, err)
		}
	}
	datadir.SyncDir(d.Plugins())
	datadir.SyncDir(d.Homes())
	reached(o.afterStep, stepRemoving)
	if err := installed.AppendLedger(d, e); err != nil {
		return cur, fmt.Errorf("plugin %s is removed but %w", o.Name, err)
	}
	if _, err := os.Stat(d.Control()); err == nil {
		log.Info("a node is running: it stops the plugin's servers when it next reconciles", "plugin", o.Name, "control", d.Control())
	}
	log.Info("plugin removed", "plugin", o.Name)
	return cur, nil
}
