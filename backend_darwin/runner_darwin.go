package backenddarwin

import (
	"bytes"
	"context"
	"debug/buildinfo"
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

// options decides what the profile cannot know from the Spec: whether the tool
// is a Go binary, which needs trustd for TLS.
func options(s *sandbox.Spec) Options {
	if len(s.Argv) == 0 {
		return Options{}
	}
	p, err := sandbox.LookPath(s.Argv[0], s.Env)
	if err != nil {
		return Options{}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.Dir, p)
	}
	_, err = buildinfo.ReadFile(p)
	return Options{TrustD: err == nil}
}

// Command implements sandbox.Backend: sandbox-exec -p PROFILE -D … -- argv, with
// exactly the tool's environment (never the node's), in a process group of its
// own so a stop reaches every child.
func (Seatbelt) Command(ctx context.Context, s *sandbox.Spec) (*sandbox.Process, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, fmt.Errorf("seatbelt: plugin %s: empty command", s.Plugin)
	}
	argv, err := Argv(s, options(s))
	if err != nil {
		return nil, err
	}
	// TMPDIR lies inside the home, the only writable place; it must exist.
	for _, kv := range s.Env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && within(v, s.Home) {
			if err := os.MkdirAll(v, 0o700); err != nil {
				return nil, fmt.Errorf("seatbelt: plugin %s: create TMPDIR: %w", s.Plugin, err)
			}
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{}, s.Env...) // never nil: nil would inherit the node's
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return &sandbox.Process{Cmd: cmd, Cleanup: func() error { return nil }}, nil
}

// Render implements sandbox.Backend with the options Command would use.
func (Seatbelt) Render(s *sandbox.Spec) (string, error) {
	return ShowWith(s, options(s))
}
