package gcpace

import (
	"context"
	"log/slog"
	"runtime/metrics"
	"testing"
	"time"
)

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

var sink []byte

// A process that allocates fast gets the slow pace within a tick or two, and
// the default pace back a few quiet ticks after it stops; the collector's own
// setting is what is read, as the runtime reports it.
func TestPaceFollowsTheAllocationRate(t *testing.T) {
	p := Pacing{Tick: 100 * time.Millisecond, Busy: 64 << 20, Quiet: 8 << 20, QuietTicks: 3, Quick: 100, Slow: 400, Extra: 64 << 20}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, p, slog.New(slog.DiscardHandler)); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, want int64, work func()) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for gogc() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC is %d, want %d", what, gogc(), want)
			}
			if work != nil {
				work()
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitFor("at start", 100, nil)
	// ~1 GB a second of garbage, well over Busy.
	churn := func() {
		for range 100 {
			sink = make([]byte, 100<<10)
		}
		time.Sleep(time.Millisecond)
	}
	waitFor("allocating fast", 400, churn)
	// Still busy while it goes on.
	for range 5 {
		churn()
	}
	if g := gogc(); g != 400 {
		t.Fatalf("while still allocating fast, GOGC went back to %d", g)
	}
	start := time.Now()
	waitFor("quiet again", 100, nil)
	if took := time.Since(start); took < 2*p.Tick {
		t.Errorf("back at the default pace after %v, before %d quiet ticks", took, p.QuietTicks)
	}
	cancel()
	<-done
	if g := gogc(); g != 100 {
		t.Errorf("after Run, GOGC is %d", g)
	}
}

// Busy with a large live heap (a big reply being read), the pace lets the heap
// grow past its live size by Extra at most, not by four times it.
func TestBusyPaceBoundsTheHeapsGrowth(t *testing.T) {
	p := Pacing{Tick: 100 * time.Millisecond, Busy: 64 << 20, Quiet: 8 << 20, QuietTicks: 3, Quick: 100, Slow: 400, Extra: 16 << 20}
	held := make([]byte, 8<<20) // live while the process allocates fast
	for i := range held {
		held[i] = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, p, slog.New(slog.DiscardHandler)); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for gogc() == 100 && time.Now().Before(deadline) {
		for range 100 {
			sink = make([]byte, 100<<10)
		}
		time.Sleep(time.Millisecond)
	}
	// 16 MB past a live heap of a little over 8 MB: a pace near 190.
	if g := gogc(); g < 120 || g > 220 {
		t.Errorf("busy with 8 MB live, GOGC is %d; want about 100 × 16 MB / the live heap", g)
	}
	if held[len(held)-1] != 1 {
		t.Fatal("held")
	}
}
