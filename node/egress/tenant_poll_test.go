package egress

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// inotifyInstances counts this process's open inotify descriptors.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("not tested: no /proc/self/fd here (%v)", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// A proxy that polls only (what exec runs) opens no inotify watch, whose teardown
// would cost every exec an SRCU grace period at exit, and still follows the list:
// a host taken off it is refused well within 100 ms, one put back is reached again.
func TestTenantPollOnlyFollowsWithoutWatch(t *testing.T) {
	before := inotifyInstances(t)
	f := newFixture(t, true, func(c *Config) { c.PollOnly, c.PollInterval = true, 25*time.Millisecond })
	time.Sleep(50 * time.Millisecond) // the watcher goroutine is running by now
	if got := inotifyInstances(t); got != before {
		t.Fatalf("a poll-only proxy opened %d inotify instance(s)", got-before)
	}
	without := strings.Replace(testTenant, hostOther+"\n", "", 1)
	for round := range 3 {
		if f.denied(t, hostOther) {
			t.Fatalf("round %d: %s is refused before it is taken off the list", round, hostOther)
		}
		writeTenant(t, f.tenant, without)
		took := eventually(t, 3*time.Second, "the removal applied", func() bool {
			return !slices.Contains(f.p.Status(0).Patterns, hostOther)
		})
		t.Logf("round %d: removal applied %v after the write", round, took)
		if took > 100*time.Millisecond {
			t.Errorf("round %d: removal applied after %v, want within 100 ms", round, took)
		}
		if !f.denied(t, hostOther) {
			t.Fatalf("round %d: %s is still reached after its removal applied", round, hostOther)
		}
		writeTenant(t, f.tenant, testTenant)
		eventually(t, 3*time.Second, "the host back on the list", func() bool {
			return slices.Contains(f.p.Status(0).Patterns, hostOther)
		})
	}
}
