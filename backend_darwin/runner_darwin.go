package backenddarwin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"oz0.ai/node/node/sandbox"
)

// Seatbelt runs Specs under sandbox-exec with a profile rendered per start.
type Seatbelt struct{}

// New returns the Seatbelt backend.
func New() sandbox.Backend { return Seatbelt{} }

// Name implements sandbox.Backend.
func (Seatbelt) Name() string { return "seatbelt" }

// probeProfile allows everything: the probe asks only whether sandbox-exec can
// apply a profile here (it cannot inside another sandbox: exit 71).
const probeProfile = "(version 1)(allow default)"

// Probe implements sandbox.Backend: sandbox-exec present and a trivial profile runs.
func (Seatbelt) Probe(ctx context.Context) sandbox.Probe {
	p := sandbox.Probe{Name: "seatbelt"}
	if v, err := syscall.Sysctl("kern.osproductversion"); err == nil {
		p.Version = "macOS " + v
	}
	if _, err := os.Stat(SandboxExec); err != nil {
		p.Err = fmt.Errorf("seatbelt probe: %w", err)
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, SandboxExec, "-p", probeProfile, "/usr/bin/true")
	cmd.Env = []string{"PATH=" + sandbox.MinimalPath}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		p.Err = fmt.Errorf("seatbelt probe: %s -p %q /usr/bin/true: %w: %s", SandboxExec, probeProfile, err, strings.TrimSpace(stderr.String()))
		return p
	}
	p.Works = true
	return p
}

// HostOptions are this Mac's facts for a render of s: the developer folder
// xcode-select names now, and for exec the terminal it runs in.
func HostOptions(s *sandbox.Spec) Options {
	o := Options{DeveloperDir: developerDir()}
	if s.Kind == "exec" {
		o.Terminal = terminal()
	}
	return o
}

// developerDir asks xcode-select (by its absolute path, with a minimal
// environment: DEVELOPER_DIR in the node's would override it) for the active
// developer folder; "" when none is set up.
func developerDir() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/xcode-select", "-p")
	cmd.Env = []string{"PATH=" + sandbox.MinimalPath}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	d := strings.TrimSpace(string(out))
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || !filepath.IsAbs(d) {
		return ""
	}
	return d
}

// terminal names the terminal device on the node's stdin, stdout or stderr (the
// ones exec hands to the tool), found by device number among /dev/ttys*.
func terminal() string {
	for _, f := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			continue
		}
		ents, err := os.ReadDir("/dev")
		if err != nil {
			return ""
		}
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "ttys") {
				continue
			}
			var dst syscall.Stat_t
			p := "/dev/" + e.Name()
			if syscall.Stat(p, &dst) == nil && dst.Rdev == st.Rdev && terminalRE.MatchString(p) {
				return p
			}
		}
	}
	return ""
}

// Command implements sandbox.Backend: sandbox-exec -p PROFILE -D … -- argv, with
// exactly the tool's environment (never the node's), in a process group of its
// own so a stop reaches every child.
func (Seatbelt) Command(ctx context.Context, s *sandbox.Spec) (*sandbox.Process, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, fmt.Errorf("seatbelt: plugin %s: empty command", s.Plugin)
	}
	o := HostOptions(s)
	argv, err := Argv(s, o)
	if err != nil {
		return nil, err
	}
	env, err := Env(s, o)
	if err != nil {
		return nil, err
	}
	if err := ensureTMPDIR(s); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{}, env...) // never nil: nil would inherit the node's
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return &sandbox.Process{Cmd: cmd, Cleanup: func() error { return nil }}, nil
}

// Render implements sandbox.Backend with the options Command would use.
func (Seatbelt) Render(s *sandbox.Spec) (string, error) {
	return ShowWith(s, HostOptions(s))
}
