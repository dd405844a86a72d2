package backendlinux

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"oz0.ai/node/node/sandbox"
)

// cgroup is one sandbox's control group: one folder per v1 controller (memory, pids,
// cpu) under the node's own group, or a single v2 folder where the unified hierarchy
// holds those controllers.
type cgroup struct {
	dirs []string
	v2   bool
	// homes are the node's own v1 groups, in the order of dirs: where a thread
	// that entered the sandbox's group to start it goes back to.
	homes []string
}

// cgroupMounts maps a v1 controller (or "" for v2) to its mount point.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		switch b[0] {
		case "cgroup2":
			out[""] = a[4]
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				if o == "memory" || o == "pids" || o == "cpu" {
					out[o] = a[4]
				}
			}
		}
	}
	return out, sc.Err()
}

// ownCgroups maps a controller (or "" for v2) to the node's own group path. It
// reads the calling thread's groups: /proc/self/cgroup is the main thread's, and
// the main thread may be the one inside a sandbox's group for a moment, starting
// it (bwrapRun.start). No caller of this runs on such a thread.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/thread-self/cgroup: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// newCgroup creates a group for one sandbox with the spec's memory, pids and CPU
// limits, nested under the node's own group so the node's limits still hold.
func newCgroup(name string, l sandbox.Limits) (*cgroup, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	leaf := "oz0-" + name + "-" + hex.EncodeToString(rnd[:]) + "-o" + ownerTag()

	if m, ok := mounts[""]; ok {
		base := filepath.Join(m, own[""])
		if ctl, err := os.ReadFile(filepath.Join(base, "cgroup.controllers")); err == nil {
			have := strings.Fields(string(ctl))
			if contains(have, "memory") && contains(have, "pids") && contains(have, "cpu") {
				return newCgroupV2(filepath.Join(base, leaf), l)
			}
		}
	}
	c := &cgroup{}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		m, ok := mounts[ctl]
		if !ok {
			c.destroy()
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted and v2 does not hold it", ctl)
		}
		home := filepath.Join(m, own[ctl])
		dir := filepath.Join(home, leaf)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.destroy()
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		c.dirs, c.homes = append(c.dirs, dir), append(c.homes, home)
		var sets [][2]string
		switch ctl {
		case "memory":
			if l.MemoryBytes > 0 {
				sets = append(sets, [2]string{"memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
				// With swap accounting, swap counts too; without it the file is absent.
				if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
					sets = append(sets, [2]string{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)})
				}
			}
		case "pids":
			if l.Pids > 0 {
				sets = append(sets, [2]string{"pids.max", strconv.Itoa(l.Pids)})
			}
		case "cpu":
			if l.CPUPercent > 0 {
				sets = append(sets, [2]string{"cpu.cfs_period_us", "100000"},
					[2]string{"cpu.cfs_quota_us", strconv.Itoa(l.CPUPercent * 1000)})
			}
		}
		for _, s := range sets {
			if err := os.WriteFile(filepath.Join(dir, s[0]), []byte(s[1]), 0); err != nil {
				c.destroy()
				return nil, fmt.Errorf("cgroup %s: set %s=%s: %w", dir, s[0], s[1], err)
			}
		}
	}
	return c, nil
}

func newCgroupV2(dir string, l sandbox.Limits) (*cgroup, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	c := &cgroup{dirs: []string{dir}, v2: true}
	var sets [][2]string
	if l.MemoryBytes > 0 {
		sets = append(sets, [2]string{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)}, [2]string{"memory.swap.max", "0"})
	}
	if l.Pids > 0 {
		sets = append(sets, [2]string{"pids.max", strconv.Itoa(l.Pids)})
	}
	if l.CPUPercent > 0 {
		sets = append(sets, [2]string{"cpu.max", strconv.Itoa(l.CPUPercent*1000) + " 100000"})
	}
	for _, s := range sets {
		if err := os.WriteFile(filepath.Join(dir, s[0]), []byte(s[1]), 0); err != nil && !(s[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			c.destroy()
			return nil, fmt.Errorf("cgroup %s: set %s=%s: %w", dir, s[0], s[1], err)
		}
	}
	return c, nil
}

// add moves a process (and so everything it starts later) into the group.
func (c *cgroup) add(pid int) error {
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}

// threadStart reports whether a sandbox can be started from a thread that entered
// the group (v1 only: v2 keeps a process's threads in one group).
func (c *cgroup) threadStart() bool { return c != nil && !c.v2 && len(c.homes) == len(c.dirs) }

// enterThread moves the calling OS thread, and only it, into the group, so that a
// process it forks is born inside. The caller has locked the goroutine to its
// thread and must call leaveThread before unlocking it. Writing "0" to a v1 tasks
// file moves the writer alone, which the kernel does without the global lock that
// moving a whole process (cgroup.procs) takes; that lock waits for an RCU grace
// period, 3-15 ms per sandbox start on a small VM.
func (c *cgroup) enterThread() error {
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "tasks"), []byte("0"), 0); err != nil {
			return fmt.Errorf("move the starting thread into cgroup %s: %w", d, err)
		}
	}
	return nil
}

// leaveThread moves the calling OS thread back into the node's own groups.
func (c *cgroup) leaveThread() error {
	var errs []error
	for _, h := range c.homes {
		if err := os.WriteFile(filepath.Join(h, "tasks"), []byte("0"), 0); err != nil {
			errs = append(errs, fmt.Errorf("move the starting thread back into cgroup %s: %w", h, err))
		}
	}
	return errors.Join(errs...)
}

// pids lists the processes in the group.
func (c *cgroup) pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range c.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// destroy kills every process in the group and removes it. A fork bomb may still be
// forking while it runs, so it repeats until the folders are gone or 5 s pass.
func (c *cgroup) destroy() error {
	if c == nil {
		return nil
	}
	if c.v2 {
		// cgroup.kill (Linux 5.14+) kills the whole subtree at once.
		os.WriteFile(filepath.Join(c.dirs[0], "cgroup.kill"), []byte("1"), 0)
	}
	deadline := time.Now().Add(5 * time.Second)
	wait := time.Millisecond
	var last error
	for {
		for _, p := range c.pids() {
			if p == os.Getpid() {
				// Only a thread that entered to start the sandbox and could not
				// leave puts the node here; it ends itself (bwrapRun.start).
				continue
			}
			syscall.Kill(p, syscall.SIGKILL)
		}
		last = nil
		for _, d := range c.dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				last = err
			}
		}
		if last == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait) // killed processes take a moment to leave the group
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
	if last != nil {
		return fmt.Errorf("remove cgroup: %w", last)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
