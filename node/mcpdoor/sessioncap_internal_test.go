package mcpdoor

import (
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/metrics"
)

// The session caps close the session idle longest (of the client, for its own
// cap), never a busy one; with none idle the new session is the one closed.
func TestSessionCapsEvictTheOldestIdleFirst(t *testing.T) {
	var findings []api.Finding
	s := newSessionCaps(3, 2, metrics.New().Caps(), func(f api.Finding) { findings = append(findings, f) }, nil, nil)
	var closed []string
	var selfClosed bool
	mk := func(name, client string) *capSession {
		c := &capSession{client: client}
		c.close = func() { closed = append(closed, name) }
		selfClosed = s.add(c)
		time.Sleep(2 * time.Millisecond) // distinct idle times
		return c
	}
	a := mk("a", "x")
	mk("b", "y")
	// a busy: not closed for the total cap even though oldest.
	a.busy = 1
	mk("c", "z")
	mk("d", "z") // over total 3: b (idle longest, a is busy) goes
	if len(closed) != 1 || closed[0] != "b" {
		t.Fatalf("closed %v, want b", closed)
	}
	// z holds c and d; a third of z's is over its cap of 2: c, its oldest idle,
	// goes (and for the total, the oldest idle other than a).
	closed = nil
	mk("e", "z")
	if len(closed) == 0 || closed[0] != "c" && closed[len(closed)-1] != "c" {
		t.Fatalf("closed %v, want c among them", closed)
	}
	// Everyone busy: the new session is the one closed.
	s.mu.Lock()
	for c := range s.all {
		c.busy = 1
	}
	s.mu.Unlock()
	closed = nil
	mk("f", "w")
	if len(closed) != 1 || closed[0] != "f" || !selfClosed {
		t.Fatalf("closed %v (the new one: %v), want only the new session f", closed, selfClosed)
	}
	if len(s.all) > 3 {
		t.Errorf("%d sessions open, cap 3", len(s.all))
	}
	if len(findings) == 0 || findings[0].Code != api.CodeSessionCap {
		t.Errorf("findings %+v", findings)
	}
}
