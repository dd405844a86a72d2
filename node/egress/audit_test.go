package egress

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
)

// auditFiles reads the live log and its rotated files, oldest first, and returns
// the records in the order they were written. Every line must be whole JSON.
func auditFiles(t *testing.T, path string, keep int) (recs []api.EgressDecision, files int) {
	t.Helper()
	names := []string{}
	for i := keep + 2; i >= 1; i-- {
		names = append(names, fmt.Sprintf("%s.%d", path, i))
	}
	names = append(names, path)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		files++
		if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v, want 0600", name, fi.Mode(), err)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if line == "" {
				continue
			}
			var d api.EgressDecision
			if err := json.Unmarshal([]byte(line), &d); err != nil {
				t.Fatalf("%s: line %q is not a whole record: %v", filepath.Base(name), line, err)
			}
			recs = append(recs, d)
		}
	}
	return recs, files
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A log that outgrows its size is rotated: nothing is lost while the old files
// are kept, records stay whole and in order, and at most keep old files remain.
func TestAuditRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "egress.jsonl")
	const max, n = 4 << 10, 2000 // ~100 bytes a record: ~50 files' worth
	a, err := openAudit(path, max, 100, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a.add(api.EgressDecision{Plugin: "alpha", Host: "h.example", Port: i, Decision: "deny", Rule: "manifest"})
	}
	a.close()
	recs, files := auditFiles(t, path, 100)
	if files < 10 {
		t.Errorf("%d files after writing %d records with a %d-byte limit: not rotated", files, n, max)
	}
	if len(recs) != n {
		t.Fatalf("%d records across the files, want %d", len(recs), n)
	}
	for i, r := range recs {
		if r.Port != i {
			t.Fatalf("record %d is #%d: out of order across rotations", i, r.Port)
		}
	}

	// With keep 2 the disk use is bounded: the live file and two old ones.
	path2 := filepath.Join(t.TempDir(), "egress.jsonl")
	a, err = openAudit(path2, max, 2, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a.add(api.EgressDecision{Plugin: "alpha", Host: "h.example", Port: i, Decision: "deny", Rule: "manifest"})
	}
	a.close()
	recs, files = auditFiles(t, path2, 2)
	if files != 3 {
		t.Errorf("%d files with keep 2, want 3", files)
	}
	if len(recs) == 0 || recs[len(recs)-1].Port != n-1 {
		t.Errorf("the newest record is not at the end of the live file")
	}
	if _, err := os.Stat(path2 + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 exists: more than keep files retained", path2)
	}
}

// Two writers share one log (the node and oz0-node exec): when one rotates,
// the other notices the file it holds was moved and does not rotate again, and
// no record of either is lost.
func TestAuditSharedRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egress.jsonl")
	const max, keep, n = 2 << 10, 200, 600
	a, err := openAudit(path, max, keep, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	b, err := openAudit(path, max, keep, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		a.add(api.EgressDecision{Plugin: "a", Host: "h.example", Port: i, Decision: "deny", Rule: "manifest"})
		b.add(api.EgressDecision{Plugin: "b", Host: "h.example", Port: i, Decision: "deny", Rule: "manifest"})
	}
	a.close()
	b.close()
	recs, _ := auditFiles(t, path, keep)
	next := map[string]int{}
	for _, r := range recs {
		if r.Port != next[r.Plugin] {
			t.Fatalf("writer %s: record #%d where #%d was due", r.Plugin, r.Port, next[r.Plugin])
		}
		next[r.Plugin]++
	}
	if next["a"] != n || next["b"] != n {
		t.Errorf("records kept: a %d, b %d; want %d each", next["a"], next["b"], n)
	}
}

// The proxy rotates its own log by the configured size.
func TestAuditRotationThroughProxy(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.AuditMaxBytes = 1 << 10; c.AuditKeep = 50 })
	for range 40 {
		c := f.dialUnix(t)
		raw(t, c, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
		c.Close()
	}
	f.p.Close()
	recs, files := auditFiles(t, f.audit, 50)
	if files < 2 {
		t.Errorf("audit not rotated at 1 KiB: %d file(s)", files)
	}
	if len(recs) != 40 {
		t.Errorf("%d deny records across the files, want 40", len(recs))
	}
}
