// Package gcpace sets the Go collector's pace by how fast the process
// allocates: Go's default (GOGC=100) while it is quiet, which holds the heap near
// its live size, and a collection a quarter as often (400) while it allocates
// fast, when collecting at the default pace would cost about a tenth of each
// call's CPU (docs/performance.md, "What 25 MB would take").
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
}

// Default is what the node runs with.
var Default = Pacing{Tick: time.Second, Busy: 16 << 20, Quiet: 4 << 20, QuietTicks: 3, Quick: 100, Slow: 400}

// Run paces the collector until ctx ends, then leaves it at p.Quick. Going
// quiet, it collects and returns the heap's free pages at once, rather than
// leaving them to the background scavenger's slow pace.
func Run(ctx context.Context, p Pacing, log *slog.Logger) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	debug.SetGCPercent(p.Quick)
	t := time.NewTicker(p.Tick)
	defer t.Stop()
	last, lastAt := allocated(), time.Now()
	busy, quiet := false, 0
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
				debug.SetGCPercent(p.Slow)
				log.Debug("collector slowed: the node allocates fast", "bytes_per_second", int64(rate), "gogc", p.Slow)
			case busy && rate < p.Quiet:
				if quiet++; quiet >= p.QuietTicks {
					busy = false
					debug.SetGCPercent(p.Quick)
					debug.FreeOSMemory()
					log.Debug("collector back at its default pace", "gogc", p.Quick)
				}
			case busy:
				quiet = 0
			}
		}
	}
}
