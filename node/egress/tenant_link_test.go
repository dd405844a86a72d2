package egress

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A tenant list that is a link to a file kept elsewhere (an operator's
// configuration folder) is followed there: an edit of the target, in place or
// by rename, takes a host off within 100 ms and closes the tunnel open to it, as
// an edit of the list itself does, not at the next poll; a link pointed at
// another file is followed to that file's folder.
func TestTenantListThatIsALinkIsFollowedToItsTarget(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.PollInterval = time.Hour })
	conf := filepath.Join(t.TempDir(), "operator")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	first, second := filepath.Join(conf, "egress-a"), filepath.Join(t.TempDir(), "egress-b")
	for _, p := range []string{first, second} {
		if err := os.WriteFile(p, []byte(testTenant), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target string) {
		t.Helper()
		tmp := f.tenant + ".lnk"
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.tenant); err != nil {
			t.Fatal(err)
		}
	}
	without := strings.Replace(testTenant, hostBoth+"\n", "", 1)
	inPlace := func(p string) func() {
		return func() {
			if err := os.WriteFile(p, []byte(without), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		target string
		edit   func()
	}{
		{"in place", first, inPlace(first)},
		{"by rename", first, func() { writeTenant(t, first, without) }},
		{"after the link was pointed elsewhere", second, inPlace(second)},
	} {
		for _, p := range []string{first, second} {
			os.WriteFile(p, []byte(testTenant), 0o644)
		}
		link(c.target)
		eventually(t, 3*time.Second, "the linked list in force", func() bool {
			return slices.Contains(f.p.Status(0).Patterns, hostBoth)
		})
		time.Sleep(50 * time.Millisecond) // the link's change has settled
		stream := streamServer(t)
		conn := f.dialUnix(t)
		br := connectTo(t, conn, fmt.Sprintf("%s:%d", hostBoth, stream.Port()))
		cut := make(chan struct{})
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := br.Read(buf); err != nil {
					close(cut)
					return
				}
			}
		}()
		edited := time.Now()
		c.edit()
		select {
		case <-cut:
		case <-time.After(3 * time.Second):
			t.Fatalf("%s: the tunnel to %s is still open 3 s after the linked list dropped it", c.name, hostBoth)
		}
		took := time.Since(edited)
		conn.Close()
		t.Logf("%s: tunnel closed %v after the edit", c.name, took)
		if took > 100*time.Millisecond {
			t.Errorf("%s: tunnel closed %v after the edit, want within 100 ms", c.name, took)
		}
		if !f.denied(t, hostBoth) {
			t.Errorf("%s: %s is still reached after the linked list dropped it", c.name, hostBoth)
		}
	}
}
