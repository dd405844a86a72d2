package serverconn

import (
	"sync/atomic"
	"testing"
	"time"
)

// The limiter lets a burst through at once, then the rate: a server allowed 50
// a second in bursts of 500 (the node's 10× for --server-notify-rate 50) has
// its first 500 small messages passed and the next dropped, and a tenth of a
// second later about five more passed. A message costs a token more per 64 KiB,
// so one larger than the whole burst never passes. Drops are counted each and
// reported once in DropReport.
func TestNoteLimiterBurstThenRate(t *testing.T) {
	var dropped atomic.Int64
	var reports []int64
	l := NewNoteLimiter(50, 500, &dropped, func(n int64) { reports = append(reports, n) })
	for i := range 500 {
		if ok, _ := l.AllowWeighted(100, 1); !ok {
			t.Fatalf("message %d of the burst of 500 dropped", i+1)
		}
	}
	if ok, _ := l.AllowWeighted(100, 1); ok {
		t.Fatal("a message past the burst passed at once")
	}
	time.Sleep(100 * time.Millisecond)
	passed := 0
	for range 100 {
		if ok, _ := l.AllowWeighted(100, 1); ok {
			passed++
		}
	}
	if passed < 4 || passed > 10 {
		t.Errorf("%d passed 100 ms after the burst at 50 a second, want about 5", passed)
	}
	if ok, _ := l.AllowWeighted(40<<20, 1); ok {
		t.Error("a 40 MiB message (641 tokens) passed a burst of 500")
	}
	if got, want := dropped.Load(), int64(1+100-passed+1); got != want {
		t.Errorf("dropped %d, want %d", got, want)
	}
	if len(reports) != 1 || reports[0] != 1 {
		t.Errorf("drops reported %v, want once, at the first", reports)
	}
}

// Past maxDrops weighted drops in a second the reading is told to pause for
// the rest of that second; a decoded drop weighs DecodedDropWeight.
func TestNoteLimiterPacesAFlood(t *testing.T) {
	var dropped atomic.Int64
	l := NewNoteLimiter(1, 1, &dropped, nil)
	l.AllowWeighted(10, 1) // the burst
	for i := range maxDrops/DecodedDropWeight - 1 {
		if ok, pause := l.AllowWeighted(10, DecodedDropWeight); ok || pause != 0 {
			t.Fatalf("drop %d: ok %v, pause %v before the second's drops reached %d", i+1, ok, pause, maxDrops)
		}
	}
	ok, pause := l.AllowWeighted(10, DecodedDropWeight)
	if ok || pause <= 0 || pause > time.Second {
		t.Errorf("at %d weighted drops: ok %v, pause %v; want a pause to the second's end", maxDrops, ok, pause)
	}
}
