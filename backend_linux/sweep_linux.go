package backendlinux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Sweep removes what a node killed with SIGKILL left behind: empty oz0-* cgroups
// (in every controller; runsc makes them in all of them) and the runsc containers,
// bundles and null network namespace mount of this data folder (unless a live process
// has a gVisor sandbox there). A group still holding a process is never
// touched, and a group younger than minAge is left alone, because another node on
// the machine may be filling it right now. It returns how much it removed.
func Sweep(ctx context.Context, dataDir string, minAge time.Duration) (int, error) {
	removed := 0
	var errs []error
	mounts, err := cgroupMounts()
	if err != nil {
		return 0, err
	}
	own, _ := ownCgroups()
	seen := map[string]bool{}
	for ctl, m := range mounts {
		parent := filepath.Join(m, own[ctl])
		if seen[parent] {
			continue
		}
		seen[parent] = true
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "oz0-") {
				continue
			}
			n, err := removeStaleGroup(filepath.Join(parent, e.Name()), minAge)
			removed += n
			if err != nil {
				errs = append(errs, err)
			}
		}
	}

	removed += sweepLandlockTmp(dataDir, minAge)

	// runsc containers, bundles and null network namespace mount of this data
	// folder, when no live process has a gVisor sandbox there (an exec or hook
	// sharing the data folder holds the users' lock; theirs are not stale).
	state := filepath.Join(dataDir, "run", "runsc")
	if sweepNullNetns(state) {
		removed++
	}
	lock, err := openAnyUsersLock(state)
	if err != nil || unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		if lock != nil {
			lock.Close()
		}
		return removed, errors.Join(errs...)
	}
	defer lock.Close()
	if runsc := findTool("runsc"); runsc != "" {
		if _, err := os.Stat(state); err == nil {
			out, err := exec.CommandContext(ctx, runsc, "--root", state, "list", "--format", "json").Output()
			if err == nil {
				var list []struct {
					ID string `json:"id"`
				}
				json.Unmarshal(out, &list)
				for _, c := range list {
					if err := exec.CommandContext(ctx, runsc, "--root", state, "delete", "--force", c.ID).Run(); err == nil {
						removed++
					} else {
						errs = append(errs, fmt.Errorf("delete stale runsc container %s: %w", c.ID, err))
					}
				}
			}
		}
	}
	bundles := filepath.Join(dataDir, "run", "runsc-bundles")
	if ents, err := os.ReadDir(bundles); err == nil {
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(bundles, e.Name())); err == nil {
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeStaleGroup removes an oz0-* cgroup no process is in, and the groups
// nested in it first (a group made by a thread that was itself in one, as a
// sandbox's start briefly is, lies below it), returning how many it removed. A
// group holding a process, or younger than minAge, is left with what holds it.
func removeStaleGroup(dir string, minAge time.Duration) (int, error) {
	fi, err := os.Stat(dir)
	if err != nil || time.Since(fi.ModTime()) < minAge {
		return 0, nil
	}
	removed := 0
	var errs []error
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "oz0-") {
			n, err := removeStaleGroup(filepath.Join(dir, e.Name()), minAge)
			removed += n
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || strings.TrimSpace(string(b)) != "" {
		return removed, errors.Join(errs...) // unreadable or still in use
	}
	switch err := os.Remove(dir); {
	case err == nil:
		removed++
	case errors.Is(err, os.ErrNotExist):
	case errors.Is(err, unix.EBUSY):
		// Still held: by a group below that is, or by a process that has exited
		// and not been reaped (a killed node's sandbox under a PID 1 that reaps
		// nothing). It goes once that is gone.
	default:
		errs = append(errs, fmt.Errorf("remove stale cgroup %s: %w", dir, err))
	}
	return removed, errors.Join(errs...)
}

// sweepLandlockTmp removes the private tmps of Landlock sandboxes that no live
// process holds (their node or exec was killed): each is under a shared lock
// while its sandbox lives, so one whose exclusive lock can be taken at once, and
// older than minAge (not one being made right now), is stale.
func sweepLandlockTmp(dataDir string, minAge time.Duration) int {
	parent := filepath.Join(dataDir, "run", "tmp")
	ents, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), landlockTmpPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		fi, err := os.Lstat(dir)
		if err != nil || time.Since(fi.ModTime()) < minAge {
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && os.RemoveAll(dir) == nil {
			removed++
		}
		f.Close()
	}
	return removed
}
