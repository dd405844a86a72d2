package daemon

import (
	"testing"

	"oz0.ai/node/node/api"
)

// A written audit line reaches whoever follows the node's events, and is made
// into an event only when someone does.
func TestAuditLinesReachFollowers(t *testing.T) {
	d := &Daemon{subs: map[chan api.Event]struct{}{}}
	d.AuditWritten(api.AuditRecord{Seq: 1, Kind: "call"}) // no one follows: nothing to see, nothing blocks
	c := make(chan api.Event, 1)
	d.mu.Lock()
	d.subs[c] = struct{}{}
	d.mu.Unlock()
	d.AuditWritten(api.AuditRecord{Seq: 2, Kind: "call", Tool: "echo__echo"})
	select {
	case ev := <-c:
		if ev.Type != "audit" || ev.Audit == nil || ev.Audit.Seq != 2 || ev.Audit.Tool != "echo__echo" || ev.Time == "" {
			t.Fatalf("event %+v, want the audit line numbered 2 with its time", ev)
		}
	default:
		t.Fatal("the follower got no event for the line")
	}
}
