package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	ks "github.com/kardianos/service"
)

// Systemd drives systemd: kardianos/service for start, stop, restart and status,
// Systemctl for what the library lacks. The library's Install is not used: it
// writes only to /etc/systemd/system, refuses an existing file and cannot be
// redirected for tests.
type Systemd struct {
	Systemctl
	svc ks.Service
	err error
}

// program is the kardianos Interface; the node runs through `oz0-node run`, never
// through the library's Run, so both hooks are empty.
type program struct{}

func (program) Start(ks.Service) error { return nil }
func (program) Stop(ks.Service) error  { return nil }

// NewSystemd returns the systemd manager for a spec.
func NewSystemd(s Spec) *Systemd {
	m := &Systemd{Systemctl: Systemctl{User: s.User}}
	// kardianos picks the first system it detects, which is sysv on a machine whose
	// PID 1 is not systemd; only the systemd one is ever wanted here.
	if p := ks.Platform(); p != "linux-systemd" {
		m.err = fmt.Errorf("systemd is not running on this machine (PID 1 is %s; kardianos/service detects %q)", pid1(), p)
		return m
	}
	cfg := &ks.Config{Name: Name, Description: Description, Option: ks.KeyValue{"UserService": s.User}}
	m.svc, m.err = ks.ChosenSystem().New(program{}, cfg)
	if m.err != nil {
		m.err = fmt.Errorf("systemd: %w", m.err)
	}
	return m
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

// Start implements Manager.
func (m *Systemd) Start(context.Context) error {
	if m.err != nil {
		return m.err
	}
	if err := m.svc.Start(); err != nil {
		return fmt.Errorf("systemctl start %s: %w", Name, err)
	}
	return nil
}

// Stop implements Manager.
func (m *Systemd) Stop(context.Context) error {
	if m.err != nil {
		return m.err
	}
	if err := m.svc.Stop(); err != nil {
		return fmt.Errorf("systemctl stop %s: %w", Name, err)
	}
	return nil
}

// Restart implements Manager.
func (m *Systemd) Restart(context.Context) error {
	if m.err != nil {
		return m.err
	}
	if err := m.svc.Restart(); err != nil {
		return fmt.Errorf("systemctl restart %s: %w", Name, err)
	}
	return nil
}

// State implements Manager. The library reports a failed unit as an error and a
// unit systemd does not know as ErrNotInstalled; the Installer has already checked
// that the file exists, so that means systemd has not read it yet.
func (m *Systemd) State(context.Context) (State, error) {
	if m.err != nil {
		return StateUnknown, m.err
	}
	st, err := m.svc.Status()
	switch {
	case errors.Is(err, ks.ErrNotInstalled):
		return StateUnknown, errors.New("systemd does not know the unit yet (run systemctl daemon-reload)")
	case err != nil && strings.Contains(err.Error(), "failed state"):
		return StateFailed, nil
	case err != nil:
		return StateUnknown, fmt.Errorf("systemd status: %w", err)
	case st == ks.StatusRunning:
		return StateRunning, nil
	case st == ks.StatusStopped:
		return StateStopped, nil
	}
	return StateUnknown, nil
}
