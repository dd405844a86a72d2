package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"syscall"
)

// Direct runs a target unsandboxed as the node's user (exempt plugins, off mode,
// tier 0). The process still gets only the minimal environment, never the node's,
// and leads a process group of its own so a stop reaches its children.
type Direct struct{}

// Name implements Backend.
func (Direct) Name() string { return "none" }

// Probe implements Backend: running without a sandbox always "works".
func (Direct) Probe(context.Context) Probe { return Probe{Name: "none", Works: true} }

// Command implements Backend.
func (Direct) Command(ctx context.Context, s *Spec) (*Process, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("plugin %s: empty command", s.Plugin)
	}
	path, err := LookPath(s.Argv[0], s.Env)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	cmd := exec.CommandContext(ctx, path, s.Argv[1:]...)
	cmd.Args[0] = s.Argv[0]
	cmd.Env = append([]string{}, s.Env...) // never nil: nil would inherit the node's
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return &Process{Cmd: cmd, Cleanup: func() error { return nil }}, nil
}

// Render implements Backend.
func (Direct) Render(s *Spec) (string, error) {
	b, err := json.MarshalIndent(struct {
		Note string   `json:"note"`
		Argv []string `json:"argv"`
		Env  []string `json:"env"`
		Dir  string   `json:"dir"`
	}{"unsandboxed: runs as the node's user with this environment only", s.Argv, s.Env, s.Dir}, "", "  ")
	return string(b) + "\n", err
}
