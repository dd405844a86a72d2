package doctor

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsOnly: the doctor is core: it imports no backend, service or TUI
// package (the command gathers what those know and hands it in as Facts).
func TestCoreImportsOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range []string{"oz0.ai/node/backend_", "oz0.ai/node/service", "oz0.ai/node/tui", "oz0.ai/node/cmd/"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("node/doctor imports %s", p)
			}
		}
	}
}
