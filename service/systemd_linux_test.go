package service

import (
	"context"
	"errors"
	"os"
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
	var calls []string
	m := &Systemd{Systemctl: Systemctl{run: func(_ context.Context, name string, args ...string) (string, error) {
		calls = append(calls, name+" "+strings.Join(args, " "))
		return "", nil
	}}}
	for _, f := range []func(context.Context) error{m.Start, m.Stop, m.Restart} {
		if err := f(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if want := "systemctl start oz0-node.service,systemctl stop oz0-node.service,systemctl restart oz0-node.service"; strings.Join(calls, ",") != want {
		t.Errorf("calls %q, want %q", calls, want)
	}
}
