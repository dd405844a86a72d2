// Package gcpace sets the Go collector's pace by how fast the process
// allocates: Go's default (GOGC=100) while it is quiet, which holds the heap near
// its live size, and up to a quarter as often (400) while it allocates fast, when
// collecting at the default pace would cost about a tenth of each call's CPU
// (docs/performance.md, "What 25 MB would take"). Busy, the heap may grow past
// its live size by at most Extra: a large live heap (a big reply being read)
// gets a slower pace than 100 only as far as that allows.
package gcpace

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Pacing are the thresholds; the zero value is not usable, Default is.
type Pacing struct {
	Tick time.Duration // how often the allocation rate is read
	// Busy is the allocation rate, in bytes a second, at which the collector
	// slows: a node answering about 2,000 tool calls a second. Quiet is the
	// rate under which it is back at its default pace, after QuietTicks ticks
	// in a row.
	Busy, Quiet float64
	QuietTicks  int
	Quick, Slow int // the GOGC values
	// Extra bounds what the heap may grow past its live size while busy.
	Extra uint64
}

// Default is what the node runs with.
var Default = Pacing{Tick: time.Second, Busy: 16 << 20, Quiet: 4 << 20, QuietTicks: 3, Quick: 100, Slow: 400, Extra: 16 << 20}

// Run paces the collector until ctx ends, then leaves it at p.Quick. Going
// quiet, it collects and returns the heap's free pages at once, rather than
// leaving them to the background scavenger's slow pace.
func Run(ctx context.Context, p Pacing, log *slog.Logger) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	allocated := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	// busyPace is the slow pace the live heap allows: Extra at most past it.
	busyPace := func() int {
		live := sample[1].Value.Uint64()
		if live == 0 {
			return p.Slow
		}
		return max(p.Quick, min(p.Slow, int(100*p.Extra/live)))
	}
	debug.SetGCPercent(p.Quick)
	t := time.NewTicker(p.Tick)
	defer t.Stop()
	last, lastAt := allocated(), time.Now()
	busy, quiet, pace := false, 0, p.Quick
	set := func(gogc int) {
		if gogc != pace {
			pace = gogc
			debug.SetGCPercent(gogc)
		}
	}
	for {
		select {
		case <-ctx.Done():
			debug.SetGCPercent(p.Quick)
			return
		case now := <-t.C:
			n := allocated()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			switch {
			case !busy && rate >= p.Busy:
				busy, quiet = true, 0
				set(busyPace())
				log.Debug("collector slowed: the node allocates fast", "bytes_per_second", int64(rate), "gogc", pace)
			case busy && rate < p.Quiet:
				if quiet++; quiet >= p.QuietTicks {
					busy = false
					set(p.Quick)
					debug.FreeOSMemory()
					log.Debug("collector back at its default pace", "gogc", p.Quick)
				}
			case busy:
				quiet = 0
				set(busyPace())
			}
		}
	}
}
