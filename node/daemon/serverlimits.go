package daemon

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/serverconn"
)

// manyTools is the size of a tool list from which attaching it is worth a
// release: the SDK re-reads each tool's schema several times when it lists and
// adds it, some 80 KB of garbage a tool (2000 tools left the node at ~100 MB).
const manyTools = 100

// releaseEvery is how often the node looks for memory it holds and no longer
// uses (expired sessions, a burst of calls): one collection at most that often.
const releaseEvery = 30 * time.Second

// releaseIdle returns memory to the system when the heap holds much more than
// its live data: the lazy collector would otherwise keep what a burst left
// (5,000 expired sessions kept the node at 150 MB, six times their live heap).
func releaseIdle(ctx context.Context, every time.Duration) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}, {Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		held, live := s[0].Value.Uint64()+s[1].Value.Uint64(), s[2].Value.Uint64()
		// At most one forced collection every period, and only when 32 MiB or
		// more could go back: cheap next to what the lazy collector keeps.
		if held > live+32<<20 {
			debug.FreeOSMemory()
		}
	}
}

// DefaultNotifyRate is how many notifications a second a server may send,
// in bursts of up to ten times as many: progress and log lines of many calls at
// once stay well under it, while a flood (which cost the node a core and every
// caller ten times their latency) is cut to it.
const DefaultNotifyRate = 200

// noteLimiter builds a server's notification limiter; its drops add to the
// server's count in status and raise a notification-flood finding.
func (d *Daemon) noteLimiter(plugin, server string) *serverconn.NoteLimiter {
	rate := float64(cmp.Or(d.cfg.NotifyRate, DefaultNotifyRate))
	k := key(plugin, server)
	d.mu.Lock()
	if d.notesDropped == nil {
		d.notesDropped = map[string]*atomic.Int64{}
	}
	n := d.notesDropped[k]
	if n == nil {
		n = new(atomic.Int64)
		d.notesDropped[k] = n
	}
	d.mu.Unlock()
	return serverconn.NewNoteLimiter(rate, int(10*rate), n, func(total int64) {
		d.raise(api.Finding{Code: api.CodeNotificationFlood, Severity: api.SevWarning, Subject: plugin + "/" + server,
			Message: fmt.Sprintf("server %s/%s sends notifications (or requests to the node) faster than %d a second; %d were dropped so far", plugin, server, int(rate), total),
			Fix:     "report it to the plugin's author: the server floods progress, log or list-changed notifications"})
	})
}

// notesDroppedOf is how many notifications of a server were dropped.
func (d *Daemon) notesDroppedOf(plugin, server string) int64 {
	if n := d.notesDropped[key(plugin, server)]; n != nil {
		return n.Load()
	}
	return 0
}
