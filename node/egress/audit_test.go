package egress

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The proxy's decisions are lines of the one audit stream: kind egress, the
// decision's fields, numbered with every other line, rotated by the size the
// proxy was given.
func TestDecisionsGoToTheAuditStream(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.AuditMaxBytes = 1 << 10; c.AuditKeep = 50 })
	for range 40 {
		c := f.dialUnix(t)
		raw(t, c, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
		c.Close()
	}
	f.p.Close()
	var egress, rotated int
	var last uint64
	err := audit.Read(f.audit, func(r api.AuditRecord, _ []byte) bool {
		if r.Seq != last+1 {
			t.Fatalf("line %d follows %d", r.Seq, last)
		}
		last = r.Seq
		switch {
		case r.Kind == "egress" && r.Decision == "deny" && r.Host == hostTenant && r.Port == 443 && r.Plugin != "" && r.Rule != "":
			egress++
		case r.Kind == "audit" && r.Decision == "rotated":
			rotated++
		default:
			t.Fatalf("unexpected line %+v", r)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if egress != 40 || rotated == 0 {
		t.Fatalf("%d deny lines (want 40), %d rotations (want some at 1 KiB)", egress, rotated)
	}
}

// A stream shared with the node (Config.Audit) is the node's to close: the
// proxy closing leaves it open for the node's other lines.
func TestASharedStreamOutlivesTheProxy(t *testing.T) {
	path := t.TempDir() + "/audit.jsonl"
	s, err := audit.Open(path, audit.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Audit = s; c.AuditPath = "" })
	c := f.dialUnix(t)
	raw(t, c, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
	c.Close()
	f.p.Close()
	s.Add(api.AuditRecord{Kind: "call", Tool: "p__t"})
	s.Close()
	var kinds []string
	audit.Read(path, func(r api.AuditRecord, _ []byte) bool { kinds = append(kinds, r.Kind); return true })
	if len(kinds) != 2 || kinds[0] != "egress" || kinds[1] != "call" {
		t.Fatalf("lines %v, want an egress line then the node's call", kinds)
	}
}
