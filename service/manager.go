package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// State is what the service manager says about the service.
type State string

const (
	StateRunning State = "running"
	StateStopped State = "stopped"
	StateFailed  State = "failed"
	StateUnknown State = "unknown"
)

// Manager is the service manager's side of install and control: systemd or
// launchd. Files are written by the Installer; a Manager only asks the manager.
type Manager interface {
	// Name is systemd or launchd.
	Name() string
	// Available is nil when the manager runs here and can be asked, else why not.
	Available() error
	// Reload makes the manager read changed files (systemctl daemon-reload).
	Reload(ctx context.Context) error
	// Enable and Disable the start at boot or login.
	Enable(ctx context.Context) error
	Disable(ctx context.Context) error
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	// Restart stops and starts the service with its current file.
	Restart(ctx context.Context) error
	State(ctx context.Context) (State, error)
}

// runFunc runs a command and returns its stdout; errors carry stderr.
type runFunc func(ctx context.Context, name string, args ...string) (string, error)

func runCommand(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Launchd drives launchd with bootstrap/bootout/kickstart, the commands current
// macOS wants, not the legacy load/unload kardianos/service uses; on macOS the
// library writes only a first plist (launchd_darwin.go).
type Launchd struct {
	// Domain is "system" for a LaunchDaemon or "gui/<uid>" for a LaunchAgent.
	Domain string
	// Plist is the installed plist's path as launchd must see it.
	Plist string
	spec  Spec
	run   runFunc
}

// NewLaunchd returns the launchd manager for a spec (uid is the user's, for agents).
func NewLaunchd(s Spec, uid int) *Launchd {
	d := "system"
	if s.User {
		d = "gui/" + strconv.Itoa(uid)
	}
	return &Launchd{Domain: d, Plist: s.Path(), spec: s, run: runCommand}
}

func (l *Launchd) target() string { return l.Domain + "/" + Label }

// Name implements Manager.
func (l *Launchd) Name() string { return "launchd" }

// Available implements Manager.
func (l *Launchd) Available() error {
	if _, err := exec.LookPath("launchctl"); err != nil {
		return fmt.Errorf("launchctl not found: launchd runs only on macOS")
	}
	return nil
}

// Reload implements Manager: launchd reads a plist at bootstrap only.
func (l *Launchd) Reload(context.Context) error { return nil }

// Enable implements Manager: RunAtLoad loads the job at boot or login; enable
// clears a disabled mark an earlier `launchctl disable` may have left.
func (l *Launchd) Enable(ctx context.Context) error {
	_, err := l.run(ctx, "launchctl", "enable", l.target())
	return err
}

// Disable implements Manager.
func (l *Launchd) Disable(ctx context.Context) error {
	_, err := l.run(ctx, "launchctl", "disable", l.target())
	return err
}

func (l *Launchd) loaded(ctx context.Context) bool {
	_, err := l.run(ctx, "launchctl", "print", l.target())
	return err == nil
}

// Start implements Manager: bootstrap loads and (RunAtLoad) starts the job; a job
// already loaded is kickstarted.
func (l *Launchd) Start(ctx context.Context) error {
	if l.loaded(ctx) {
		_, err := l.run(ctx, "launchctl", "kickstart", l.target())
		return err
	}
	_, err := l.run(ctx, "launchctl", "bootstrap", l.Domain, l.Plist)
	return err
}

// Stop implements Manager: bootout, since KeepAlive would restart a killed job.
func (l *Launchd) Stop(ctx context.Context) error {
	if !l.loaded(ctx) {
		return nil
	}
	_, err := l.run(ctx, "launchctl", "bootout", l.target())
	return err
}

// Restart implements Manager: bootout and bootstrap, so a changed plist is read.
func (l *Launchd) Restart(ctx context.Context) error {
	if err := l.Stop(ctx); err != nil {
		return err
	}
	_, err := l.run(ctx, "launchctl", "bootstrap", l.Domain, l.Plist)
	return err
}

// State implements Manager from `launchctl print`: not loaded is stopped.
func (l *Launchd) State(ctx context.Context) (State, error) {
	out, err := l.run(ctx, "launchctl", "print", l.target())
	if err != nil {
		return StateStopped, nil
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "state = "); ok {
			switch v {
			case "running":
				return StateRunning, nil
			case "not running", "waiting":
				return StateStopped, nil
			}
			return StateUnknown, fmt.Errorf("launchctl print %s: state %q", l.target(), v)
		}
	}
	return StateUnknown, fmt.Errorf("launchctl print %s: no state line", l.target())
}

// Systemctl holds the systemctl calls of the systemd manager
// (start, stop, restart, status, daemon-reload, enable, disable) with their --user
// placement.
type Systemctl struct {
	User bool
	run  runFunc
}

func (c Systemctl) call(ctx context.Context, args ...string) (string, error) {
	if c.User {
		args = append([]string{"--user"}, args...)
	}
	run := c.run
	if run == nil {
		run = runCommand
	}
	return run(ctx, "systemctl", args...)
}

// Reload runs systemctl daemon-reload.
func (c Systemctl) Reload(ctx context.Context) error {
	_, err := c.call(ctx, "daemon-reload")
	return err
}

// Enable runs systemctl enable.
func (c Systemctl) Enable(ctx context.Context) error {
	_, err := c.call(ctx, "enable", Name+".service")
	return err
}

// Disable runs systemctl disable.
func (c Systemctl) Disable(ctx context.Context) error {
	_, err := c.call(ctx, "disable", Name+".service")
	return err
}

// ErrNoManager is returned by every action when no service manager runs here.
var ErrNoManager = errors.New("no service manager to ask")
