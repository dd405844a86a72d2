package serverconn

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// NoteLimiter bounds one server's notifications (and whatever else it sends
// unasked) with a token bucket: rate a second, bursts up to burst, each message
// costing one token and one more per 64 KiB (a large notification costs the node
// as many small ones would). What is over is dropped and counted; past maxDrops
// drops or maxDropBytes in a second the reading pauses until the second ends.
type NoteLimiter struct {
	bucket  *rate.Limiter
	dropped *atomic.Int64
	// onDrop is called with the total dropped at the first drop and then at
	// most every DropReport.
	onDrop func(total int64)
	report rate.Sometimes

	mu       sync.Mutex
	window   time.Time // start of the second drops are counted in
	drops    int
	dropSize int
}

// NewNoteLimiter bounds a server's notifications to perSecond a second in
// bursts of burst; each drop adds to dropped, and onDrop (if set) is told the
// total at the first drop and then at most every DropReport.
func NewNoteLimiter(perSecond float64, burst int, dropped *atomic.Int64, onDrop func(total int64)) *NoteLimiter {
	return &NoteLimiter{bucket: rate.NewLimiter(rate.Limit(perSecond), burst), dropped: dropped, onDrop: onDrop,
		report: rate.Sometimes{Interval: DropReport}}
}

// DropReport is how often, at most, a server's drops are reported.
const DropReport = 10 * time.Second

// maxDrops is how many notifications a second a server may have dropped before
// its output is read no faster: dropping one costs well under a microsecond, so
// this keeps a flood under a few per cent of a core (unpaced, a server sending
// 1.7 million a second kept the node at 0.9 core).
const maxDrops = 20000

// maxDropBytes bounds the bytes a second dropped notifications may take: each is
// read and scanned before it is dropped.
const maxDropBytes = 16 << 20

// AllowWeighted says whether a message of size bytes goes on, and how long the
// reading should wait; a drop counts weight times toward the pacing (the message's
// cost to the node before it could be judged).
func (l *NoteLimiter) AllowWeighted(size, weight int) (ok bool, pause time.Duration) {
	now := time.Now()
	if l.bucket.AllowN(now, 1+size>>16) {
		return true, 0
	}
	l.mu.Lock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.drops, l.dropSize = now, 0, 0
	}
	l.drops += weight
	if l.dropSize += size; l.drops >= maxDrops || l.dropSize >= maxDropBytes {
		pause = time.Second - now.Sub(l.window)
	}
	l.mu.Unlock()
	total := l.dropped.Add(1)
	if l.onDrop != nil {
		l.report.Do(func() { l.onDrop(total) })
	}
	return false, pause
}

// DecodedDropWeight: a line judged only after its decode (an escaped key, say)
// costs the node some twenty times what one the byte scan drops does, so its drop
// counts as many toward the pacing.
const DecodedDropWeight = 20
