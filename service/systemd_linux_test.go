package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/config"
)

// The systemd manager is usable exactly when PID 1 is systemd; elsewhere it says
// why instead of falling back to another init system.
func TestSystemdAvailability(t *testing.T) {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		t.Skipf("cannot read /proc/1/comm (%v): systemd detection NOT tested", err)
	}
	s := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	err = NewSystemd(s).Available()
	if pid1 := strings.TrimSpace(string(b)); pid1 == "systemd" {
		if err != nil {
			t.Errorf("PID 1 is systemd, yet: %v", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "PID 1 is "+pid1) {
		t.Errorf("PID 1 is %s, want an error naming it, got %v", pid1, err)
	}
}

// What systemctl answers becomes the node's service state; every call names the
// unit and, for a user service, --user.
func TestSystemdStateFromSystemctl(t *testing.T) {
	for _, tc := range []struct {
		active, files string
		activeErr     error
		want          State
		wantErr       bool
	}{
		{active: "active\n", want: StateRunning},
		{active: "activating\n", activeErr: errors.New("exit status 3"), want: StateRunning},
		{active: "failed\n", activeErr: errors.New("exit status 3"), want: StateFailed},
		{active: "inactive\n", activeErr: errors.New("exit status 3"), files: "oz0-node.service disabled enabled\n", want: StateStopped},
		{active: "inactive\n", activeErr: errors.New("exit status 3"), files: "0 unit files listed.\n", want: StateUnknown, wantErr: true},
		{active: "", activeErr: errors.New("exit status 1: Failed to connect to bus"), want: StateUnknown, wantErr: true},
	} {
		for _, user := range []bool{false, true} {
			var calls []string
			m := &Systemd{Systemctl: Systemctl{User: user, run: func(_ context.Context, name string, args ...string) (string, error) {
				calls = append(calls, name+" "+strings.Join(args, " "))
				if slices.Contains(args, "is-active") {
					return tc.active, tc.activeErr
				}
				return tc.files, nil
			}}}
			got, err := m.State(context.Background())
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("is-active %q, unit files %q: %v, %v; want %v (error %v)", tc.active, tc.files, got, err, tc.want, tc.wantErr)
			}
			for _, c := range calls {
				if !strings.Contains(c, Name+".service") || strings.Contains(c, "--user") != user {
					t.Errorf("user %v: call %q", user, c)
				}
			}
		}
	}
}

// recordingSystemctl puts a systemctl first on PATH that appends its arguments to
// the returned log and exits with code. It stands for systemd where PID 1 is not
// systemd: what is tested is the command line the library runs for the node.
func recordingSystemctl(t *testing.T, code int) string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := fmt.Sprintf("#!/bin/sh\necho \"systemctl $*\" >> %s\nexit %d\n", log, code)
	if err := os.WriteFile(filepath.Join(dir, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

// Start, stop and restart go through kardianos/service, which runs systemctl with
// the unit's name and, for a user service, --user; a failure names the action and
// where systemd says why.
func TestSystemdControlThroughLibrary(t *testing.T) {
	ctx := context.Background()
	for _, user := range []bool{false, true} {
		log := recordingSystemctl(t, 0)
		s := specFor(t, Linux, user, config.Flags{"data-dir": {SystemDataDir}})
		m := &Systemd{Systemctl: Systemctl{User: user}, spec: s, sys: systemdSystem()}
		for _, f := range []func(context.Context) error{m.Start, m.Stop, m.Restart} {
			if err := f(ctx); err != nil {
				t.Fatal(err)
			}
		}
		b, _ := os.ReadFile(log)
		want := "systemctl start oz0-node.service\nsystemctl stop oz0-node.service\nsystemctl restart oz0-node.service\n"
		if user {
			want = "systemctl start --user oz0-node.service\nsystemctl stop --user oz0-node.service\nsystemctl restart --user oz0-node.service\n"
		}
		if string(b) != want {
			t.Errorf("user %v: systemctl ran as\n%s\nwant\n%s", user, b, want)
		}
	}
	recordingSystemctl(t, 5)
	m := &Systemd{spec: specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}}), sys: systemdSystem()}
	if err := m.Start(ctx); err == nil || !strings.Contains(err.Error(), "systemctl start oz0-node.service") || !strings.Contains(err.Error(), "journalctl -u oz0-node") {
		t.Errorf("a failed start: %v", err)
	}
	// A manager that cannot be asked runs nothing.
	log := recordingSystemctl(t, 0)
	m = &Systemd{err: errors.New("systemd is not running"), sys: systemdSystem()}
	if err := m.Stop(ctx); err == nil {
		t.Error("an unavailable manager stopped")
	}
	if b, _ := os.ReadFile(log); len(b) != 0 {
		t.Errorf("an unavailable manager ran %s", b)
	}
}
