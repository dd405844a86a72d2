package backendlinux

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestBackendsWorkUnderNodeUmask probes each backend under umask 077, which the
// node sets at start: a folder the backend creates for the sandbox must not depend
// on a looser umask (gVisor's rootfs skeleton once did, and runsc could not load
// /bin/ls inside).
func TestBackendsWorkUnderNodeUmask(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: probing under the node's umask needs root (as in CI)")
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	tested := 0
	for name, tool := range map[string]string{"bwrap": "bwrap", "gvisor": "runsc"} {
		if findTool(tool) == "" {
			t.Logf("not tested on %s: %s is not installed", name, tool)
			continue
		}
		b, err := New(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tested++
		if p := b.Probe(context.Background()); !p.Works {
			t.Errorf("%s probe fails under umask 077: %v", name, p.Err)
		}
	}
	if tested == 0 {
		t.Skip("not tested: neither bwrap nor runsc is installed")
	}
}
