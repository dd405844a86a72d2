//go:build unix

package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"oz0.ai/node/node/datadir"
)

// lockPath is the lock every install and removal holds for its whole run: two
// installs never interleave, and staging is only cleaned while nobody installs.
func lockPath(d datadir.Dir) string { return filepath.Join(d.Plugins(), ".lock") }

type lock struct{ f *os.File }

// acquire waits for the plugins lock (flock, released by the kernel when the holder
// dies, even by SIGKILL), giving up when ctx ends.
func acquire(ctx context.Context, d datadir.Dir, log *slog.Logger) (*lock, error) {
	if err := os.MkdirAll(d.Plugins(), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", d.Plugins(), err)
	}
	f, err := os.OpenFile(lockPath(d), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open install lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &lock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", lockPath(d), err)
		}
		if !told {
			log.Warn("waiting for another plugin install or removal to finish", "lock", lockPath(d))
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for the install lock %s: %w", lockPath(d), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *lock) release() { l.f.Close() }

// tryAcquire takes the lock only if nobody holds it.
func tryAcquire(d datadir.Dir) (*lock, bool, error) {
	f, err := os.OpenFile(lockPath(d), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open install lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", lockPath(d), err)
	}
	return &lock{f: f}, true, nil
}
