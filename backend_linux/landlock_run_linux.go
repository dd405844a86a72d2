package backendlinux

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"oz0.ai/node/node/reexec"
)

func init() { reexec.Register(landlockHelper, landlockMain) }

// Descriptors the node hands the runner.
const (
	llFDPlan    = 3 // the plan (landlockPlan, JSON in a memfd)
	llFDControl = 4 // the node's pipe: end of file means "end the sandbox now"
)

// landlockMain is the runner: the node's binary, started by the node with an
// empty environment. It fails with 125 when the sandbox cannot be made (nothing
// of the tool ran), and otherwise exits as the tool did (128+signal if killed).
func landlockMain([]string) int {
	f := os.NewFile(llFDPlan, "landlock-plan")
	var p landlockPlan
	err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&p)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "oz0-node landlock runner: read the plan: %v\n", err)
		return 125
	}
	// Nothing the node handed over but stdio may reach the tool.
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	code, err := runLandlock(&p, os.NewFile(llFDControl, "landlock-control"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "oz0-node landlock runner: plugin %s: %v\n", p.Plugin, err)
		return 125
	}
	return code
}

// runLandlock makes the sandbox and stays its reaper:
//
//  1. as the node's user (root on a root node): it joins the sandbox's cgroup,
//     sets the rlimits and builds the Landlock ruleset (opening every path
//     without following symlinks);
//  2. on one locked thread: it empties the capability bounding set (a root
//     node), takes no_new_privs, the ruleset and the seccomp filter, and starts
//     the tool from it, as the plugin's user with no supplementary groups (a
//     root node), in a session of its own and with a parent-death signal.
//     Confinement is per thread and inherited at fork, so the tool is confined
//     while the runner's other threads, and the node, never are. The runner
//     itself stays the node's user, out of the tool's reach: another uid on a
//     root node, and outside its Landlock domain, which scopes signals;
//  3. as child subreaper it inherits everything the tool leaves behind, forwards
//     SIGTERM, SIGINT, SIGHUP and SIGQUIT to the tool, and when the tool ends, or
//     the node closes the control pipe (Cleanup, or the node died), kills every
//     process left below it.
func runLandlock(p *landlockPlan, ctl *os.File) (int, error) {
	if len(p.Argv) == 0 {
		return 0, errors.New("empty command")
	}
	if os.Geteuid() == 0 && !p.SwitchUser {
		return 0, errLandlockRoot
	}
	if err := joinCgroups(p.Cgroups); err != nil {
		return 0, err
	}
	for _, r := range p.Limits {
		lim := unix.Rlimit{Cur: r.Value, Max: r.Value}
		if err := unix.Setrlimit(r.Resource, &lim); err != nil {
			return 0, fmt.Errorf("setrlimit %d=%d: %w", r.Resource, r.Value, err)
		}
	}
	abi := LandlockABI()
	if abi < 1 {
		return 0, errors.New("Landlock is not available on this kernel")
	}
	filter, err := LandlockSeccompBPF(runtime.GOARCH, p.variant())
	if err != nil {
		return 0, err
	}
	ruleset, err := landlockRuleset(p, abi)
	if err != nil {
		return 0, err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		unix.Close(ruleset)
		return 0, fmt.Errorf("become the sandbox's reaper: %w", err)
	}
	// Signals to forward are caught before the tool exists, so none is lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)

	started := make(chan error, 1)
	var tool int
	release := make(chan struct{})
	go func() {
		// Locked and never unlocked: the thread carries the sandbox's
		// confinement and retires with this goroutine. It stays until the tool
		// has ended, since the tool's parent-death signal follows it.
		runtime.LockOSThread()
		pid, err := confineAndStart(p, ruleset, filter)
		tool = pid
		started <- err
		if err == nil {
			<-release
		}
	}()
	err = <-started
	unix.Close(ruleset)
	if err != nil {
		return 0, err
	}
	defer close(release)

	// The tool by a pidfd: a signal forwarded after it was reaped must not reach
	// whatever process took its pid next.
	toolFD, err := unix.PidfdOpen(tool, 0)
	if err != nil {
		unix.Kill(tool, unix.SIGKILL)
		reap(tool)
		return 0, fmt.Errorf("pidfd of the tool: %w", err)
	}
	ended := make(chan struct{}, 1)
	go func() {
		// The node never writes: a read returns only when the node closes its
		// end or exits.
		var b [1]byte
		ctl.Read(b[:])
		ended <- struct{}{}
	}()
	go func() {
		for {
			select {
			case s := <-sigs:
				unix.PidfdSendSignal(toolFD, s.(syscall.Signal), nil, 0)
			case <-ended:
				unix.PidfdSendSignal(toolFD, unix.SIGKILL, nil, 0)
				killBelow()
			}
		}
	}()
	return reap(tool), nil
}

// reap waits for the tool, then kills whatever it left below the runner and
// reaps that too. It returns the tool's exit code.
func reap(tool int) int {
	code := -1
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD: nothing is left
			break
		}
		if pid == tool {
			switch {
			case ws.Exited():
				code = ws.ExitStatus()
			case ws.Signaled():
				code = 128 + int(ws.Signal())
			}
			killBelow()
		}
	}
	if code < 0 {
		code = 125
	}
	return code
}

// killBelow kills every process below the runner, again and again until none
// is left alive (one may be forking while it runs); the dead are reaped by reap.
// As child subreaper the runner is the parent of every orphan of the sandbox,
// whatever session it made.
//
// A pid listed may be reaped (by its parent in the sandbox) and taken by an
// unrelated process before the signal, and the runner may be root: each is
// signalled through a pidfd, and only once that pidfd's process is seen to be a
// child of the runner or of another process listed.
func killBelow() {
	self := os.Getpid()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		below := descendants(self)
		family := map[int]bool{self: true}
		for _, pid := range below {
			family[pid] = true
		}
		alive := 0
		for _, pid := range below {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue // gone
			}
			if ppid, ok := parentOf(pid); ok && family[ppid] && running(pid) {
				unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				alive++
			}
			unix.Close(fd)
		}
		if alive == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// parentOf is a process's parent pid, from /proc.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command name, which is in parentheses: state, ppid.
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(st[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// joinCgroups moves the runner into the sandbox's cgroup folders, unless it was
// born inside (Process.Starter).
func joinCgroups(dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for _, d := range dirs {
		if cgroupHolds(string(own), d) {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}

// cgroupHolds reports whether a /proc/PID/cgroup text puts the process in the
// folder dir (its group path is dir's tail).
func cgroupHolds(procCgroup, dir string) bool {
	for _, l := range strings.Split(strings.TrimSpace(procCgroup), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && parts[2] != "/" && strings.HasSuffix(dir, parts[2]) {
			return true
		}
	}
	return false
}

// landlockConfigs are go-landlock's presets by ABI version: the rights each
// version can restrict.
var landlockConfigs = []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}

// Landlock rights by access class (landlockPlan's rules).
const (
	llFileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	llReadRights = ll.AccessFSReadFile | ll.AccessFSReadDir
	llExecRights = llReadRights | ll.AccessFSExecute
	// llWriteRights are everything but device ioctls and connecting to socket
	// files, which no rule grants.
	llWriteRights = llExecRights | ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
		ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSRefer | ll.AccessFSTruncate
	llDevRights = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
)

func llRights(access string) (uint64, error) {
	switch access {
	case llRead:
		return llReadRights, nil
	case llExec:
		return llExecRights, nil
	case llWrite:
		return llWriteRights, nil
	case llDev:
		return llDevRights, nil
	}
	return 0, fmt.Errorf("unknown access %q", access)
}

// landlockRuleset builds the ruleset for the kernel's ABI: every right that ABI
// can restrict is handled (network rights only under ProxyOnly), and each rule
// grants its class's rights, file rights only on a file.
func landlockRuleset(p *landlockPlan, abi int) (int, error) {
	cfg := landlockConfigs[min(abi, len(landlockConfigs))-1]
	attr := ll.RulesetAttr{HandledAccessFS: uint64(cfg.HandledAccessFS), Scoped: uint64(cfg.Scoped)}
	if p.ProxyOnly {
		attr.HandledAccessNet = uint64(cfg.HandledAccessNet)
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	for _, r := range p.Rules {
		rights, err := llRights(r.Access)
		if err != nil {
			return -1, fmt.Errorf("rule %s: %w", r.Path, err)
		}
		f, err := openNoSymlinks(r.Path, unix.O_PATH)
		if err != nil {
			if r.Optional && errors.Is(err, unix.ENOENT) {
				continue
			}
			return -1, fmt.Errorf("rule %s: open without following symlinks: %w", r.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return -1, fmt.Errorf("rule %s: %w", r.Path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= llFileRights
		}
		rights &= attr.HandledAccessFS
		if rights != 0 {
			err = ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: int(f.Fd())}, 0)
		}
		f.Close()
		if err != nil {
			return -1, fmt.Errorf("rule %s: landlock_add_rule: %w", r.Path, err)
		}
	}
	if p.ConnectPort > 0 && attr.HandledAccessNet&ll.AccessNetConnectTCP != 0 {
		if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(p.ConnectPort)}, 0); err != nil {
			return -1, fmt.Errorf("rule TCP connect %d: landlock_add_rule: %w", p.ConnectPort, err)
		}
	}
	ok = true
	return fd, nil
}

// confineAndStart runs on the locked thread: it confines the thread and starts
// the tool from it. A fork inherits the forking thread's capability bounding set,
// Landlock domain, seccomp filter and no_new_privs, so the tool is born confined;
// the child switches to the plugin's user just before its exec.
func confineAndStart(p *landlockPlan, ruleset int, filter []byte) (int, error) {
	if p.SwitchUser {
		// The bounding set is per thread: the tool inherits this one's, empty.
		for c := 0; c <= unix.CAP_LAST_CAP; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				return 0, fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	if err := ll.LandlockRestrictSelf(ruleset, 0); err != nil {
		return 0, fmt.Errorf("landlock_restrict_self: %w", err)
	}
	if len(filter) == 0 || len(filter)%8 != 0 {
		return 0, fmt.Errorf("seccomp filter of %d bytes", len(filter))
	}
	prog := unix.SockFprog{Len: uint16(len(filter) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&filter[0]))}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return 0, fmt.Errorf("seccomp filter: %w", err)
	}
	runtime.KeepAlive(filter)
	path, err := lookTool(p.Argv[0], p.Env)
	if err != nil {
		return 0, err
	}
	// syscall.ForkExec, not os/exec: os.StartProcess asks for a pidfd, which
	// takes clone3, which the filter answers with ENOSYS.
	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if p.SwitchUser {
		attr.Credential = &syscall.Credential{Uid: p.UID, Gid: p.GID, Groups: []uint32{}}
	}
	pid, err := syscall.ForkExec(path, p.Argv, &syscall.ProcAttr{
		Dir:   p.Dir,
		Env:   p.Env,
		Files: []uintptr{0, 1, 2},
		Sys:   attr,
	})
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", p.Argv[0], err)
	}
	return pid, nil
}

// lookTool finds the tool as a shell would, with the tool's own PATH, as seen
// from inside the sandbox.
func lookTool(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the tool's PATH %s", name, strconv.Quote(pathVar))
}
