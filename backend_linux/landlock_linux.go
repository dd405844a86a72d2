package backendlinux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
)

// Landlock runs sandboxes on the Landlock tier: no namespace, so it works where
// user namespaces are refused (Ubuntu's AppArmor restriction, containers without
// CAP_SYS_ADMIN, user.max_user_namespaces=0). The node starts its own binary as
// the runner (landlockHelper) with the plan on a descriptor; see runLandlock for
// what the runner does.
type Landlock struct{}

func newLandlock() *Landlock { return &Landlock{} }

// Name implements sandbox.Backend.
func (*Landlock) Name() string { return policy.BackendLandlock }

// Render implements sandbox.Backend.
func (*Landlock) Render(s *sandbox.Spec) (string, error) {
	return renderLandlock(s, lstatInspect, LandlockABI(), os.Geteuid() == 0)
}

// LandlockABI is the kernel's Landlock ABI version, 0 when Landlock is not there
// (a kernel before 5.13, or one booted without it among its LSMs).
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// errLandlockRoot: a tool running as root is never left to Landlock alone, which
// does not confine modes, owners or times of the files root owns (every system
// file).
var errLandlockRoot = errors.New("a Landlock sandbox never runs a tool as root, and per-plugin users are off on this node")

// Command implements sandbox.Backend. It decides (the plan), makes the private
// tmp and the cgroup, and builds the runner's command; the runner does the rest
// in the sandbox's own process.
func (l *Landlock) Command(ctx context.Context, s *sandbox.Spec) (*sandbox.Process, error) {
	if os.Geteuid() == 0 && !s.PluginUser {
		return nil, fmt.Errorf("plugin %s: %w (move the data folder to one every user can traverse, e.g. /var/lib/oz0-node)", s.Plugin, errLandlockRoot)
	}
	plan, err := buildLandlock(s, lstatInspect)
	if err != nil {
		return nil, err
	}
	if err := prepare(s); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	self, err := reexec.Self()
	if err != nil {
		return nil, err
	}
	run := &landlockRun{}
	ok := false
	defer func() {
		if !ok {
			run.cleanup(nil)
		}
	}()
	if run.tmp, run.tmpLock, err = privateTmp(s); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	plan.withTmp(run.tmp)
	if run.cg, err = sandboxCgroup(s); err != nil {
		return nil, err
	}
	reached(stepCgroup)
	if run.cg != nil {
		plan.Cgroups = run.cg.dirs
	}
	body, err := json.Marshal(plan)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: landlock plan: %w", s.Plugin, err)
	}
	// Descriptors the node inherited without close-on-exec would reach the
	// runner, and from it the tool: mark every one of them.
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	planF, err := memfdWith("oz0-landlock-plan", body)
	if err != nil {
		return nil, err
	}
	run.files = append(run.files, planF)
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("plugin %s: runner control pipe: %w", s.Plugin, err)
	}
	run.files = append(run.files, ctlR)
	run.ctl = ctlW
	cmd := exec.CommandContext(ctx, self)
	cmd.Args = []string{reexec.Argv0(landlockHelper)}
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{planF, ctlR} // fds 3 and 4
	proc := &sandbox.Process{Cmd: cmd, Cleanup: func() error { return run.cleanup(cmd) }}
	if run.cg.threadStart() {
		// Born inside its cgroup: the runner need not move itself there.
		proc.Starter = func() error { return startInside(run.cg, cmd, nil) }
	}
	ok = true
	return proc, nil
}

// landlockRun is one started Landlock sandbox as the node holds it.
type landlockRun struct {
	once  sync.Once
	files []*os.File // the runner's descriptors, the node's copies
	ctl   *os.File   // the node's end of the control pipe: closing it ends the sandbox
	cg    *cgroup
	tmp   string
	// tmpLock holds a shared lock on the private tmp while the sandbox lives,
	// so a sweep after a killed node takes only what no live sandbox uses.
	tmpLock *os.File
}

// cleanup ends the sandbox: closing the control pipe has the runner kill
// everything the tool left and exit; then the runner itself, the cgroup (which
// kills what is left in it) and the private tmp go.
func (r *landlockRun) cleanup(cmd *exec.Cmd) error {
	var err error
	r.once.Do(func() {
		if r.ctl != nil {
			r.ctl.Close()
		}
		for _, f := range r.files {
			f.Close()
		}
		if cmd != nil && cmd.Process != nil {
			// The runner ends by itself once the pipe closes; a runner that
			// has not within a moment is killed, and its tool with it
			// (parent-death signal).
			for deadline := time.Now().Add(2 * time.Second); cmd.ProcessState == nil && running(cmd.Process.Pid) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			cmd.Process.Kill()
		}
		err = r.cg.destroy()
		if r.tmp != "" {
			if rerr := os.RemoveAll(r.tmp); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the sandbox's tmp %s: %w", r.tmp, rerr))
			}
		}
		if r.tmpLock != nil {
			r.tmpLock.Close()
		}
	})
	return err
}

// privateTmp makes the sandbox's own tmp (the tool's TMPDIR, its /tmp stand-in):
// a fresh folder below the data folder's run/tmp, the plugin user's own, held
// under a shared lock (see SweepLandlockTmp) by the returned file.
func privateTmp(s *sandbox.Spec) (string, *os.File, error) {
	dir, err := makePrivateTmp(s)
	if err != nil {
		return "", nil, err
	}
	lock, err := os.Open(dir)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_SH)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		os.Remove(dir)
		return "", nil, fmt.Errorf("private tmp %s: lock: %w", dir, err)
	}
	return dir, lock, nil
}

// landlockTmpPrefix begins the name of every private tmp.
const landlockTmpPrefix = "oz0-"

func makePrivateTmp(s *sandbox.Spec) (string, error) {
	parent := os.TempDir()
	if s.DataDir != "" {
		parent = filepath.Join(s.DataDir, "run", "tmp")
		mode := os.FileMode(0o700)
		if os.Geteuid() == 0 {
			mode = 0o711 // plugin users traverse to their own, never list
		}
		if err := os.MkdirAll(parent, mode); err != nil {
			return "", fmt.Errorf("private tmp: %w", err)
		}
		if err := os.Chmod(parent, mode); err != nil {
			return "", fmt.Errorf("private tmp: %w", err)
		}
	}
	dir, err := os.MkdirTemp(parent, landlockTmpPrefix+cgroupName(s)+"-")
	if err != nil {
		return "", fmt.Errorf("private tmp: %w", err)
	}
	if s.PluginUser && os.Geteuid() == 0 {
		if err := os.Lchown(dir, int(s.UID), int(s.GID)); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("private tmp %s: give it to the plugin's user: %w", dir, err)
		}
	}
	return dir, nil
}

// Probe implements sandbox.Backend: it runs a real Landlock sandbox that must
// list a system folder and must not read a file outside its rules, so a kernel
// that takes the ruleset but does not enforce it is not trusted.
func (l *Landlock) Probe(ctx context.Context) sandbox.Probe {
	pr := sandbox.Probe{Name: l.Name()}
	abi := LandlockABI()
	if abi < 1 {
		pr.Err = fmt.Errorf("landlock: not available (a kernel before 5.13, or Landlock is not among the LSMs it was booted with: lsm=): %w", sandbox.ErrUnavailable)
		return pr
	}
	pr.Version = "Landlock ABI " + strconv.Itoa(abi)
	pr.Gaps = LandlockNotCovered(abi, os.Geteuid() == 0)
	canary, err := os.CreateTemp("", "oz0-landlock-probe-")
	if err != nil {
		pr.Err = fmt.Errorf("landlock probe: %w", err)
		return pr
	}
	canary.WriteString("oz0-landlock-probe-canary\n")
	canary.Close()
	os.Chmod(canary.Name(), 0o644)
	defer os.Remove(canary.Name())
	s := probeSpec("")
	s.Argv = []string{"/bin/sh", "-c", `ls /usr && ! cat "$0"`, canary.Name()}
	if err := runLandlockProbe(ctx, l, s); err != nil {
		pr.Err = fmt.Errorf("landlock: %w (%w)", err, sandbox.ErrUnavailable)
		return pr
	}
	pr.Works = true
	return pr
}

func runLandlockProbe(ctx context.Context, b sandbox.Backend, s *sandbox.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	p, err := b.Command(ctx, s)
	if err != nil {
		return err
	}
	defer p.Cleanup()
	var out, errb strings.Builder
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &errb
	if err := p.Start(); err != nil {
		return fmt.Errorf("probe sandbox: %w", err)
	}
	err = p.Cmd.Wait()
	if strings.Contains(out.String(), "oz0-landlock-probe-canary") {
		return errors.New("probe sandbox read a file outside its rules: Landlock is not enforced")
	}
	if err != nil {
		return fmt.Errorf("probe sandbox (ls /usr; cat outside its rules): %w: %s", err, strings.TrimSpace(errb.String()))
	}
	if !strings.Contains(out.String(), "bin") {
		return fmt.Errorf("probe sandbox (ls /usr) listed %q", strings.TrimSpace(out.String()))
	}
	return nil
}
