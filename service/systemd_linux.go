package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Systemd drives systemd through systemctl: start, stop, restart and status, and
// (Systemctl) daemon-reload, enable and disable. It calls systemctl itself rather
// than through a service library: such a library detects the init system in its
// package initialisation (PATH searches, /proc reads), which every start of the
// binary paid, every exec and in-sandbox egress bridge included.
type Systemd struct {
	Systemctl
	err error
}

// NewSystemd returns the systemd manager for a spec.
func NewSystemd(s Spec) *Systemd {
	m := &Systemd{Systemctl: Systemctl{User: s.User}}
	if !systemdRuns() {
		m.err = fmt.Errorf("systemd is not running on this machine (PID 1 is %s)", pid1())
	}
	return m
}

// systemdRuns reports whether systemd manages this machine: its runtime folder
// exists (what sd_booted checks), or PID 1 is systemd with systemctl at hand, or
// the system is rpm-ostree based.
func systemdRuns() bool {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		return true
	}
	if _, err := exec.LookPath("rpm-ostree"); err == nil {
		return true
	}
	if _, err := exec.LookPath("systemctl"); err != nil {
		return false
	}
	return pid1() == "systemd"
}

func pid1() string {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Name implements Manager.
func (m *Systemd) Name() string { return "systemd" }

// Available implements Manager.
func (m *Systemd) Available() error { return m.err }

// action runs systemctl ACTION on the unit.
func (m *Systemd) action(ctx context.Context, action string) error {
	if m.err != nil {
		return m.err
	}
	if _, err := m.call(ctx, action, Name+".service"); err != nil {
		return fmt.Errorf("systemctl %s %s: %w", action, Name, err)
	}
	return nil
}

// Start implements Manager.
func (m *Systemd) Start(ctx context.Context) error { return m.action(ctx, "start") }

// Stop implements Manager.
func (m *Systemd) Stop(ctx context.Context) error { return m.action(ctx, "stop") }

// Restart implements Manager.
func (m *Systemd) Restart(ctx context.Context) error { return m.action(ctx, "restart") }

// State implements Manager, from systemctl is-active (which exits non-zero for
// every state but active, so its output decides). The Installer has already
// checked that the unit file exists, so a unit systemd lists no file for means
// systemd has not read it yet.
func (m *Systemd) State(ctx context.Context) (State, error) {
	if m.err != nil {
		return StateUnknown, m.err
	}
	out, err := m.call(ctx, "is-active", Name+".service")
	st := strings.TrimSpace(out)
	switch {
	case st == "active" || st == "activating" || st == "reloading":
		return StateRunning, nil
	case st == "failed":
		return StateFailed, nil
	case st == "inactive" || st == "deactivating":
		files, ferr := m.call(ctx, "list-unit-files", "--type=service", Name+".service")
		if ferr == nil && strings.Contains(files, Name+".service") {
			return StateStopped, nil
		}
		return StateUnknown, errors.New("systemd does not know the unit yet (run systemctl daemon-reload)")
	case err != nil:
		return StateUnknown, fmt.Errorf("systemd status: %w", err)
	}
	return StateUnknown, nil
}
