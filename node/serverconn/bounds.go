// Package serverconn holds the node's transports to MCP servers, under the
// gateway's clients: a local server's stdio (its process started and ended, its
// fast path), a remote server over HTTP through its egress endpoint, and the
// bounds both hold every server's messages to (one message's size, the rate of
// what a server sends unasked).
package serverconn

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// DefaultMaxResult is the largest message a server may send (a local server's
// JSON-RPC line, a remote server's body or event; so one call's result): larger
// ones are answered to their caller as an error and the connection to the
// server goes on.
const DefaultMaxResult = 8 << 20

// TooLargeAnswer is the error that answers a call whose result was over max.
func TooLargeAnswer(id []byte, max int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"result too large: over %d MiB (dropped by the node)"}}`, id, max>>20)
}

// LargeMessage is the size from which a message's copies are worth handing back
// to the system once it has been answered: the collector would keep their pages
// (the node runs with a lazy GC for call latency) until its next cycle, minutes
// away on an idle node.
const LargeMessage = 1 << 20

// releaseDelays leave the result time to reach its caller before a collection;
// the later one catches a result still being written on a busy machine.
var releaseDelays = [...]time.Duration{time.Second, 5 * time.Second}

var (
	releaseMu     sync.Mutex
	releaseTimers []*time.Timer
)

// ReleaseSoon returns the heap's free pages to the system once no large message
// has been read for each of releaseDelays: two collections after a burst of
// them, not two each.
func ReleaseSoon() {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if releaseTimers == nil {
		for _, d := range releaseDelays {
			releaseTimers = append(releaseTimers, time.AfterFunc(d, release))
		}
		return
	}
	for i, t := range releaseTimers {
		t.Reset(releaseDelays[i])
	}
}

func release() {
	// encoding/json keeps its large encode buffers in a sync.Pool, which a
	// first collection only moves to its victim cache.
	runtime.GC()
	debug.FreeOSMemory()
}
