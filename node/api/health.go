package api

import (
	"encoding/json"
	"fmt"
	"os"
)

// ReadHealth reads a health file. A node killed before it could write "stopped"
// leaves its last health behind: when alive says its pid no longer runs, the
// health read is HealthStopped (stale tells the caller so).
func ReadHealth(path string, alive func(pid int) bool) (h Health, stale bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return h, false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, false, fmt.Errorf("read %s: %w", path, err)
	}
	if h.Status != HealthStopped && (h.PID <= 0 || !alive(h.PID)) {
		h.Status, stale = HealthStopped, true
	}
	return h, stale, nil
}
