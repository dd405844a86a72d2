package service

import (
	"os"
	"strings"
	"testing"

	"oz0.ai/node/node/config"
)

// The systemd manager is usable exactly when PID 1 is systemd; elsewhere it says
// why instead of letting kardianos/service fall back to sysv.
func TestSystemdAvailability(t *testing.T) {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		t.Skipf("cannot read /proc/1/comm (%v): systemd detection NOT tested", err)
	}
	s := specFor(t, Linux, false, config.Flags{DataDir: SystemDataDir})
	err = NewSystemd(s).Available()
	if pid1 := strings.TrimSpace(string(b)); pid1 == "systemd" {
		if err != nil {
			t.Errorf("PID 1 is systemd, yet: %v", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "PID 1 is "+pid1) {
		t.Errorf("PID 1 is %s, want an error naming it, got %v", pid1, err)
	}
}
