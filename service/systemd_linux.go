package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	ks "github.com/kardianos/service"
)

// systemdPlatform is the library's name for its systemd backend.
const systemdPlatform = "linux-systemd"

// Systemd drives systemd. kardianos/service (library.go) writes a first unit,
// enables it and reloads systemd, removes it again, and starts, stops and restarts
// it; Systemctl is the node's own for what replaces an installed unit
// (daemon-reload, enable) and State.
type Systemd struct {
	Systemctl
	spec Spec
	// sys is the library's systemd backend, taken by name rather than as the
	// system the library detected, so a manager that cannot be asked (err) still
	// has one and says why instead of driving sysv.
	sys ks.System
	err error
}

// NewSystemd returns the systemd manager for a spec. It is available when the
// library detected systemd: its runtime folder (what sd_booted checks), an
// rpm-ostree system, or PID 1 systemd with systemctl at hand.
func NewSystemd(s Spec) *Systemd {
	m := &Systemd{Systemctl: Systemctl{User: s.User}, spec: s, sys: systemdSystem()}
	if p := ks.Platform(); p != systemdPlatform {
		m.err = fmt.Errorf("systemd is not running on this machine (PID 1 is %s; kardianos/service detects %s)", pid1(), p)
	} else if m.sys == nil {
		m.err = errors.New("kardianos/service has no systemd backend")
	}
	return m
}

// systemdSystem is the library's systemd backend.
func systemdSystem() ks.System {
	for _, sys := range ks.AvailableSystems() {
		if sys.String() == systemdPlatform {
			return sys
		}
	}
	return nil
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

// service is the library's service for the node's unit, with unit as its
// template (nil for control, which renders nothing).
func (m *Systemd) service(unit []byte) (ks.Service, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.sys == nil {
		return nil, errors.New("kardianos/service has no systemd backend")
	}
	svc, err := m.sys.New(program{}, libraryConfig(Name, m.spec, "SystemdScript", unit))
	if err != nil {
		return nil, fmt.Errorf("kardianos/service: %w", err)
	}
	return svc, nil
}

// control runs a library action. The library drops systemctl's own message
// (its error is the exit status), so the error says where systemd tells why.
func (m *Systemd) control(action string, do func(ks.Service) error) error {
	svc, err := m.service(nil)
	if err != nil {
		return err
	}
	if err := do(svc); err != nil {
		return fmt.Errorf("systemctl %s %s.service: %w (%s)", action, Name, err, m.why())
	}
	return nil
}

// why says where systemd explains a failed action.
func (m *Systemd) why() string {
	if m.User {
		return "systemctl --user status " + Name + " and journalctl --user -u " + Name + " say why"
	}
	return "systemctl status " + Name + " and journalctl -u " + Name + " say why"
}

// Start implements Manager.
func (m *Systemd) Start(context.Context) error {
	return m.control("start", ks.Service.Start)
}

// Stop implements Manager.
func (m *Systemd) Stop(context.Context) error {
	return m.control("stop", ks.Service.Stop)
}

// Restart implements Manager.
func (m *Systemd) Restart(context.Context) error {
	return m.control("restart", ks.Service.Restart)
}

// libraryPath is where the library writes the unit: /etc/systemd/system, or the
// user's ~/.config/systemd/user with the home from $HOME.
func (m *Systemd) libraryPath() (string, error) {
	if !m.spec.User {
		return "/etc/systemd/system/" + Name + ".service", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config/systemd/user", Name+".service"), nil
}

// installNew has the library write the unit (it refuses one that exists), enable
// it and reload systemd.
func (m *Systemd) installNew(_ context.Context, unit []byte) error {
	svc, err := m.service(unit)
	if err != nil {
		return err
	}
	if err := svc.Install(); err != nil {
		return fmt.Errorf("kardianos/service install (write, systemctl enable, daemon-reload): %w", err)
	}
	return nil
}

// uninstall has the library stop the service, disable it, remove the unit and
// reload systemd.
func (m *Systemd) uninstall(context.Context) (bool, error) {
	if err := m.control("stop", ks.Service.Stop); err != nil {
		return false, fmt.Errorf("stop: %w", err)
	}
	svc, err := m.service(nil)
	if err != nil {
		return false, err
	}
	if err := svc.Uninstall(); err != nil {
		return false, fmt.Errorf("kardianos/service uninstall (systemctl disable, remove, daemon-reload): %w", err)
	}
	return true, nil
}

// State implements Manager, from systemctl is-active (which exits non-zero for
// every state but active, so its output decides). It is the node's own: the
// library reads reloading and deactivating as not installed and a failed unit
// only as an error text. The Installer has already checked that the unit file
// exists, so a unit systemd lists no file for means systemd has not read it yet.
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
