package backendlinux

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/policy"
)

// Sweep removes what a node killed with SIGKILL left behind, at whatever step of a
// start it died (docs/promises.md, "No sandbox outlives its node"): every process
// of a sandbox no running process owns, and its cgroup; the runsc containers,
// bundles and null network namespace mount of this data folder (unless a live
// process has a gVisor sandbox there). A sandbox's cgroup names the process that
// made it (groupOwner): one whose owner is gone has its processes killed and goes,
// whatever its age; one whose owner runs is never touched. An untagged group (runsc
// makes its own) goes only once empty and older than minAge, because another node
// on the machine may be filling it right now. Processes outside any group go too:
// those of a plugin's uid reparented to init (their node died), and this data
// folder's bwrap children stuck before their sandbox began (orphanProcesses). It
// returns how much it removed.
func Sweep(ctx context.Context, dataDir string, minAge time.Duration) (int, error) {
	removed := killOrphans(dataDir)
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
			dir := filepath.Join(parent, e.Name())
			age := minAge
			if pid, start, tagged := groupOwner(e.Name()); tagged {
				if ownerAlive(pid, start) {
					continue
				}
				// Its owner is gone: what it holds is no one's, however young.
				killGroup(dir)
				age = 0
			}
			n, err := removeStaleGroup(dir, age)
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

// killGroup kills every process in a cgroup folder until none is left (one may be
// forking while it runs), for up to 5 s.
func killGroup(dir string) {
	cg := &cgroup{dirs: []string{dir}}
	for deadline := time.Now().Add(5 * time.Second); ; {
		pids := cg.pids()
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			if p != os.Getpid() {
				killPid(p)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killPid sends SIGKILL through a pidfd, so a pid reused since it was listed is
// never hit by mistake once the pidfd is open.
func killPid(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	unix.Close(fd)
}

// killOrphans kills the sandbox processes no running process owns that are in no
// cgroup of the node's (orphanProcesses), with everything below them, until none
// is left; it returns how many it found.
func killOrphans(dataDir string) int {
	found := 0
	for round := 0; round < 50; round++ {
		orphans := orphanProcesses(dataDir)
		if len(orphans) == 0 {
			break
		}
		for _, p := range orphans {
			for _, c := range descendants(p) {
				killPid(c)
			}
			killPid(p)
		}
		found += len(orphans)
		time.Sleep(20 * time.Millisecond) // killed ones leave, their children reparent
	}
	return found
}

// orphanProcesses lists the processes of a sandbox whose node is gone: reparented
// to init (this pid namespace's pid 1) and either running as a plugin's uid
// (policy.PluginUID: nothing else on a host runs as one, and a live sandbox's
// processes have their node, bwrap or the Landlock runner as parent) or, on a
// node without plugin users, a bwrap of this data folder's (its command is the
// node's gate and names a file of the data folder).
func orphanProcesses(dataDir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		var name string
		var ppid, uid int64 = -1, -1
		for _, line := range strings.Split(string(st), "\n") {
			k, v, _ := strings.Cut(line, ":")
			f := strings.Fields(v)
			switch {
			case k == "Name" && len(f) > 0:
				name = f[0]
			case k == "PPid" && len(f) > 0:
				ppid, _ = strconv.ParseInt(f[0], 10, 64)
			case k == "Uid" && len(f) > 1:
				uid, _ = strconv.ParseInt(f[1], 10, 64) // effective
			}
		}
		if ppid != 1 || !running(pid) {
			continue
		}
		if uid >= policy.UIDBase && uid < policy.UIDBase+policy.UIDSpan {
			out = append(out, pid)
			continue
		}
		if name != "bwrap" || dataDir == "" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmd, []byte("\x00"+gateArgv0+"\x00")) && bytes.Contains(cmd, []byte(dataDir+"/")) {
			out = append(out, pid)
		}
	}
	return out
}
