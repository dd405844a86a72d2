package backendlinux

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// A sandbox's cgroup carries the process that made it (the node, or an exec,
// hook or install beside it) in its name, "-o<pid>.<start time>", so that a sweep
// can tell one whose owner is gone (killed with SIGKILL, mid-start included)
// from one a live process is filling, whatever its age: the pid alone could have
// been reused, the pid with its start time (clock ticks since boot) cannot.

// ownerTag is this process's tag.
var ownerTag = sync.OnceValue(func() string {
	pid := os.Getpid()
	return fmt.Sprintf("%d.%d", pid, startTime(pid))
})

// startTime is a process's start time in clock ticks since boot (0 when it is
// gone).
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// After the command: state is field 3; start time is field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// groupOwner parses the owner tag at the end of a cgroup's name; ok is false
// for a name without one (made by a node before tags, or by runsc).
func groupOwner(name string) (pid int, start uint64, ok bool) {
	i := strings.LastIndex(name, "-o")
	if i < 0 {
		return 0, 0, false
	}
	p, s, found := strings.Cut(name[i+2:], ".")
	if !found {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}

// ownerAlive reports whether the process that made a tagged cgroup still runs.
func ownerAlive(pid int, start uint64) bool {
	return startTime(pid) == start && running(pid)
}

// The steps of a sandbox's start, in order (a bwrap start passes them all; a
// Landlock or gVisor start, stepCgroup). The kill tests stop a process acting as
// the node at each and kill it there (sweep_kill_linux_test.go).
const (
	stepCgroup   = "cgroup"   // its cgroup (and a gVisor bundle) made, nothing started
	stepForked   = "forked"   // bwrap started, born in its cgroup; its report not read
	stepReported = "reported" // the sandbox's pid read; its limits not set
	stepLimited  = "limited"  // its limits set; the gate still closed
	stepGated    = "gated"    // the gate open: the tool runs
)

// stepHook, when set, is told as a start passes each step. Only this package's
// tests set it.
var stepHook func(step string)

func reached(step string) {
	if stepHook != nil {
		stepHook(step)
	}
}
