package backendlinux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Bwrap runs sandboxes with bubblewrap. On a root node bwrap itself starts as the
// plugin's user (exec.Cmd credentials: uid, gid, no supplementary groups), so it
// builds an unprivileged user namespace and outside the namespaces every process
// of the sandbox *is* that uid. bwrap reports the sandbox's pid on --info-fd; the
// node moves the sandbox's processes into its cgroup and sets their rlimits while
// bwrap sets up, and only then opens the gate (see gateScript) that lets the tool
// start, so nothing of the tool runs before its limits hold. bwrap and the gate get
// none of the tool's environment: the gate reads it from a descriptor and hands it
// on only at its exec of the tool.
type Bwrap struct {
	// Path is the bwrap executable.
	Path string
}

// Name implements sandbox.Backend.
func (b *Bwrap) Name() string { return policy.BackendBwrap }

// Render implements sandbox.Backend.
func (b *Bwrap) Render(s *sandbox.Spec) (string, error) { return renderBwrap(s, lstatInspect) }

// openNoFollow opens a bind source as an O_PATH descriptor, refusing a symlink in
// any component, so what is bound is what was checked.
func openNoFollow(p string) (*os.File, error) {
	f, err := openNoSymlinks(p, unix.O_PATH)
	if err != nil {
		return nil, fmt.Errorf("open bind source %s without following symlinks: %w", p, err)
	}
	return f, nil
}

// openReadNoFollow opens a system file to be copied into the sandbox, refusing a
// symlink in any component.
func openReadNoFollow(p string) (*os.File, error) {
	f, err := openNoSymlinks(p, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("open %s to copy it without following symlinks: %w", p, err)
	}
	return f, nil
}

// openNoSymlinks opens p with flags (plus O_CLOEXEC|O_NOFOLLOW), resolving no
// symlink in any component; kernels without openat2 check the last one only.
func openNoSymlinks(p string, flags int) (*os.File, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(p, flags, 0)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

func memfdWith(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err == nil {
		_, err = f.Seek(0, io.SeekStart)
		if err == nil {
			return f, nil
		}
	}
	f.Close()
	return nil, fmt.Errorf("memfd %s: write: %w", name, err)
}

// Command implements sandbox.Backend. It decides (bwrap's arguments, the seccomp
// filter), gathers what the child inherits (descriptors, a cgroup), builds the
// command, and leaves a watcher to set the sandbox's limits and open its gate once
// bwrap reports the sandbox's pid.
func (b *Bwrap) Command(ctx context.Context, s *sandbox.Spec) (*sandbox.Process, error) {
	plan, filter, err := decideBwrap(s)
	if err != nil {
		return nil, err
	}
	fds, err := openChildFiles(s, plan, filter)
	if err != nil {
		return nil, err
	}
	cg, err := sandboxCgroup(s)
	if err != nil {
		fds.close()
		return nil, err
	}
	reached(stepCgroup)
	cmd := b.command(ctx, s, plan, fds)
	run := &bwrapRun{s: s, cg: cg, fds: fds, initFD: -1}
	go run.openGate()
	proc := &sandbox.Process{Cmd: cmd, Cleanup: func() error { return run.cleanup(cmd) }}
	if cg.threadStart() {
		proc.Starter = func() error { return run.start(cmd) }
	}
	return proc, nil
}

// start starts bwrap from a thread that has entered the sandbox's cgroup, so bwrap
// and everything under it are born inside and the gate need not move them (see
// cgroup.enterThread). The thread goes back to the node's groups once bwrap is
// forked. A thread that cannot go back ends rather than run node code inside the
// sandbox's limits; as bwrap's parent thread its end kills bwrap
// (--die-with-parent, Pdeathsig), so nothing runs half-limited.
func (r *bwrapRun) start(cmd *exec.Cmd) error {
	// before the fork: the gate reads it once bwrap reports
	return startInside(r.cg, cmd, func() { r.inside.Store(true) })
}

// startInside starts cmd from a thread that entered cg, so the process is born
// inside (see cgroup.enterThread); before, if set, runs on that thread just
// before the fork. The thread goes back to the node's groups once cmd is forked;
// a thread that cannot go back kills the child and ends rather than run node
// code inside the sandbox's limits.
func startInside(cg *cgroup, cmd *exec.Cmd, before func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cg.enterThread(); err != nil {
			if lerr := cg.leaveThread(); lerr != nil {
				errc <- errors.Join(err, lerr)
				return // locked: the thread ends
			}
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		if before != nil {
			before()
		}
		err := cmd.Start()
		if lerr := cg.leaveThread(); lerr != nil {
			if cmd.Process != nil {
				cmd.Process.Kill()
			}
			errc <- errors.Join(err, lerr)
			return // locked: the thread ends
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// decideBwrap is everything Command decides before it opens anything: bwrap's
// arguments, the modes a plugin user needs below the data folder, and the seccomp
// filter.
func decideBwrap(s *sandbox.Spec) (*bwrapPlan, []byte, error) {
	plan, err := buildBwrap(s, lstatInspect)
	if err != nil {
		return nil, nil, err
	}
	if err := prepare(s); err != nil {
		return nil, nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	filter, err := SeccompBPF(runtime.GOARCH)
	if err != nil {
		return nil, nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	return plan, filter, nil
}

// childFiles are the descriptors bwrap inherits, in order from fd 3 (fdArgs,
// fdSeccomp, fdInfo, fdGate, fdEnv, then the bind sources from fdFirstBind), and
// the node's ends of the info and gate pipes.
type childFiles struct {
	files        []*os.File // the node's copies close on Cleanup
	infoR, gateW *os.File
}

// close closes every descriptor of the child's and the node's pipe ends.
func (c *childFiles) close() {
	for _, f := range append(c.files, c.gateW, c.infoR) {
		if f != nil {
			f.Close()
		}
	}
}

// openChildFiles opens what bwrap inherits: its arguments and the seccomp filter
// in memfds, the info and gate pipes, the tool's environment in a memfd, and each
// bind source without following symlinks. On error nothing stays open.
func openChildFiles(s *sandbox.Spec, plan *bwrapPlan, filter []byte) (_ *childFiles, err error) {
	// Descriptors the node inherited without close-on-exec would reach the tool:
	// mark every one of them; ExtraFiles are dup'ed over this in the child.
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	fds := &childFiles{}
	defer func() {
		if err != nil {
			fds.close()
		}
	}()
	var args bytes.Buffer
	for _, a := range plan.Args {
		args.WriteString(a)
		args.WriteByte(0)
	}
	argsF, err := memfdWith("oz0-bwrap-args", args.Bytes())
	if err != nil {
		return nil, err
	}
	fds.files = append(fds.files, argsF)
	secF, err := memfdWith("oz0-seccomp", filter)
	if err != nil {
		return nil, err
	}
	fds.files = append(fds.files, secF)
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("info pipe: %w", err)
	}
	fds.infoR = infoR
	fds.files = append(fds.files, infoW)
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("gate pipe: %w", err)
	}
	fds.gateW = gateW
	fds.files = append(fds.files, gateR)
	envF, err := memfdWith("oz0-tool-env", plan.Env)
	if err != nil {
		return nil, err
	}
	fds.files = append(fds.files, envF)
	for _, src := range plan.Sources {
		open := openNoFollow
		if src.Copy {
			open = openReadNoFollow
		}
		if src.Data != nil {
			open = func(name string) (*os.File, error) {
				return memfdWith("oz0"+strings.ReplaceAll(name, "/", "-"), src.Data)
			}
		}
		f, err := open(src.Path)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
		}
		fds.files = append(fds.files, f)
	}
	return fds, nil
}

// sandboxCgroup is the sandbox's cgroup when it has memory, process or CPU
// limits; nil when it has none, or when the node is not root and cannot make one
// (said in the log).
func sandboxCgroup(s *sandbox.Spec) (*cgroup, error) {
	if s.Limits.MemoryBytes <= 0 && s.Limits.Pids <= 0 && s.Limits.CPUPercent <= 0 {
		return nil, nil
	}
	cg, err := newCgroup(cgroupName(s), s.Limits)
	if err != nil && os.Geteuid() == 0 {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	if err != nil {
		slog.Warn("sandbox runs without a cgroup: the node is not root", "plugin", s.Plugin, "err", err)
		return nil, nil
	}
	return cg, nil
}

// command is bwrap's command: an empty environment (bwrap's own shows in
// /proc/1/environ), the child's descriptors, and on a root node the plugin's user.
func (b *Bwrap) command(ctx context.Context, s *sandbox.Spec, plan *bwrapPlan, fds *childFiles) *exec.Cmd {
	cmd := exec.CommandContext(ctx, b.Path, plan.argv()...)
	cmd.Env = []string{}
	cmd.ExtraFiles = fds.files
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 && s.PluginUser {
		attr.Credential = &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: []uint32{}}
	}
	cmd.SysProcAttr = attr
	return cmd
}

// bwrapRun is one started sandbox as the node holds it: its descriptors, its
// cgroup, its init (by pidfd) and the egress endpoint served inside it.
type bwrapRun struct {
	s    *sandbox.Spec
	cg   *cgroup
	fds  *childFiles
	once sync.Once
	// inside: bwrap was started from within its cgroup (start), so its processes
	// need no move.
	inside atomic.Bool

	// initFD is the sandbox's init, held by a pidfd: killing it ends its whole PID
	// namespace (a pidfd cannot hit a reused pid). An exiting init first waits for
	// the kernel to kill and reap everything in its namespace, so waiting for the
	// pidfd to turn readable means the whole sandbox is gone.
	initMu sync.Mutex
	initFD int

	detachMu sync.Mutex
	detach   func() // the egress endpoint served inside the sandbox, if any
}

// release closes the node's copies of the child's descriptors and its pipe ends,
// once.
func (r *bwrapRun) release() {
	r.once.Do(r.fds.close)
}

// killInit kills the sandbox's init and waits (up to 5 s) until it is gone.
func (r *bwrapRun) killInit() {
	r.initMu.Lock()
	defer r.initMu.Unlock()
	if r.initFD >= 0 {
		unix.PidfdSendSignal(r.initFD, unix.SIGKILL, nil, 0)
		fds := []unix.PollFd{{Fd: int32(r.initFD), Events: unix.POLLIN}}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if n, err := unix.Poll(fds, 100); n > 0 || (err != nil && err != unix.EINTR) {
				break
			}
		}
		unix.Close(r.initFD)
		r.initFD = -1
	}
}

// openGate waits for bwrap to report the sandbox's pid, sets its limits, serves
// its egress endpoint inside it where it has one, and only then lets the tool
// start. If any step fails the sandbox is killed and the gate closes unopened.
func (r *bwrapRun) openGate() {
	s := r.s
	reached(stepForked)
	pid, err := readChildPid(r.fds.infoR)
	if err != nil {
		return // bwrap failed before starting the sandbox, or Cleanup ran first
	}
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		r.initMu.Lock()
		r.initFD = fd
		r.initMu.Unlock()
	}
	reached(stepReported)
	// The node's copies of the child's descriptors stay open until Cleanup:
	// closing them here would race with the caller's Start, which reads them.
	cg := r.cg
	if r.inside.Load() {
		cg = nil // born inside: only the rlimits are left to set
	}
	if err := limitSandbox(pid, s, cg); err != nil {
		if !errors.Is(err, errInitGone) {
			slog.Error("sandbox limits failed; killing it", "plugin", s.Plugin, "pid", pid, "err", err)
		}
		r.killInit()
		r.release() // the gate closes unopened: the tool never runs
		return
	}
	reached(stepLimited)
	if s.Network == policy.NetProxy && s.Proxy != nil && s.Proxy.Attach != nil {
		d, err := s.Proxy.Attach(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			slog.Error("egress endpoint in the sandbox failed; killing it", "plugin", s.Plugin, "pid", pid, "err", err)
			r.killInit()
			r.release()
			return
		}
		r.detachMu.Lock()
		r.detach = d
		r.detachMu.Unlock()
	}
	r.fds.gateW.Write([]byte("\n"))
	r.fds.gateW.Close()
	reached(stepGated)
}

// cleanup ends the sandbox: descriptors, bwrap, the sandbox's init, the egress
// endpoint inside it, and its cgroup.
func (r *bwrapRun) cleanup(cmd *exec.Cmd) error {
	r.release()
	if cmd.Process != nil {
		cmd.Process.Kill() // after Wait this is a no-op error
	}
	r.killInit()
	r.detachMu.Lock()
	if r.detach != nil {
		r.detach()
		r.detach = nil
	}
	r.detachMu.Unlock()
	return r.cg.destroy()
}

// readChildPid reads bwrap's --info-fd report up to the sandbox's pid. bwrap writes it
// in one write, so the first match is complete.
func readChildPid(r io.Reader) (int, error) {
	var buf []byte
	tmp := make([]byte, 512)
	for {
		n, err := r.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if pid, ok := childPid(buf); ok {
			return strconv.Atoi(pid)
		}
		if err != nil {
			return 0, fmt.Errorf("bwrap info: %w", err)
		}
		if len(buf) > 1<<16 {
			return 0, errors.New("bwrap info: no child-pid")
		}
	}
}

// childPid finds `"child-pid":` followed by optional white space and digits in
// bwrap's report and returns the digits.
func childPid(b []byte) (string, bool) {
	_, rest, ok := bytes.Cut(b, []byte(`"child-pid":`))
	if !ok {
		return "", false
	}
	rest = bytes.TrimLeft(rest, " \t\n\r\f")
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	return string(rest[:n]), n > 0
}

// limitSandbox puts the sandbox's processes into its cgroup and sets their rlimits
// while the gate holds the tool back. First the sandbox's init (bwrap's child):
// whatever it starts afterwards is born inside. Then the process it starts for the
// tool (the gate), once /proc lists it: bwrap's init starts exactly one, and a fork
// under way while init's limits changed copies the old rlimits and may not be
// listed yet, so the gate is waited for and limited itself. The gate forks nothing,
// so no process escapes.
func limitSandbox(init int, s *sandbox.Spec, cg *cgroup) error {
	if err := limitProcess(init, s, cg); err != nil {
		return err
	}
	limited := map[int]bool{}
	for deadline := time.Now().Add(gateWait); ; {
		below := descendantsOf(init)
		for _, pid := range below {
			if limited[pid] {
				continue
			}
			if err := limitProcess(pid, s, cg); err != nil {
				return err
			}
			limited[pid] = true
		}
		switch {
		case len(below) > 0:
			return nil
		case !running(init):
			return errInitGone
		case time.Now().After(deadline):
			return fmt.Errorf("the sandbox started no process for the tool within %s", gateWait)
		}
		time.Sleep(250 * time.Microsecond)
	}
}

// gateWait bounds how long bwrap may take from reporting the sandbox's pid to
// starting the tool's process (mounts and seccomp; milliseconds when all is well).
const gateWait = 30 * time.Second

// errInitGone: the sandbox's init ended before it started the tool (bwrap failed
// setting up, and says why on its stderr).
var errInitGone = errors.New("the sandbox ended before it started the tool")

// descendantsOf is descendants; a test replaces it to model a fork /proc does not
// list yet.
var descendantsOf = descendants

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	st := string(b)
	if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
		return st[i+2] != 'Z' && st[i+2] != 'X'
	}
	return true
}

// descendants lists the processes under pid (children first, then theirs).
func descendants(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", p, t.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
					queue = append(queue, c)
				}
			}
		}
	}
	return out
}

// limitProcess moves one process into the cgroup and sets its rlimits.
func limitProcess(pid int, s *sandbox.Spec, cg *cgroup) error {
	if cg != nil {
		if err := cg.add(pid); err != nil {
			return err
		}
	}
	set := func() error {
		for _, r := range rlimits(s) {
			lim := unix.Rlimit{Cur: r.value, Max: r.value}
			if err := unix.Prlimit(pid, r.resource, &lim, nil); err != nil {
				return fmt.Errorf("prlimit %s=%d on pid %d: %w", r.name, r.value, pid, err)
			}
		}
		return nil
	}
	if os.Geteuid() != 0 || !s.PluginUser {
		return set() // same user: prlimit needs no privilege to lower limits
	}
	return asUser(s.UID, s.GID, set)
}

// asUser runs f on an OS thread of its own whose real and effective ids are the
// plugin's. prlimit(2) on another user's process needs CAP_SYS_RESOURCE, which root
// in a container often lacks (this machine's root does); a caller whose ids match the
// target's may lower its limits without it. Credentials are per thread in Linux, so
// the switch is a raw syscall on a locked thread; the saved ids stay 0, so the thread
// keeps its permitted capabilities and switches back before it is unlocked.
//
// The thread must not exit: a child's parent-death signal (Pdeathsig, bwrap's
// --die-with-parent) fires when the *thread* that forked it exits, and this thread
// may well be the one that started a sandbox. Only if switching back fails does the
// goroutine end locked, which retires the thread rather than reuse it with the
// plugin's ids.
func asUser(uid, gid uint32, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore := func() bool {
			if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, 0, 0, 0); e != 0 {
				return false
			}
			if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, 0, 0, 0); e != 0 {
				return false
			}
			return true
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), 0); e != 0 {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("switch thread to gid %d: %w", gid, e)
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), 0); e != 0 {
			if restore() {
				runtime.UnlockOSThread()
			}
			errc <- fmt.Errorf("switch thread to uid %d: %w", uid, e)
			return
		}
		err := f()
		if !restore() {
			errc <- errors.Join(err, errors.New("switch thread back to root failed; thread retired"))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}
func cgroupName(s *sandbox.Spec) string {
	n := s.Plugin
	if s.Server != "" {
		n += "-" + s.Server
	} else if s.Kind != "" {
		n += "-" + s.Kind
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, n)
}
