package serverconn

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sjson "github.com/segmentio/encoding/json"
)

// ProgressWatch hands a server's progress notifications under the tokens it
// watches to their watchers as the server's messages are read, instead of to the
// SDK (gateway.ProgressOrder): a watcher runs before any message read after the
// notification is passed on, so a call can forward its progress before its
// answer. Its zero value watches nothing.
type ProgressWatch struct {
	mu      sync.Mutex
	watched map[string]func(json.RawMessage)
	n       atomic.Int32 // len(watched): readers skip the look when 0
}

// WatchProgress hands the progress under token to seen until stop.
func (w *ProgressWatch) WatchProgress(token string, seen func(params json.RawMessage)) (stop func()) {
	w.mu.Lock()
	if w.watched == nil {
		w.watched = map[string]func(json.RawMessage){}
	}
	w.watched[token] = seen
	w.n.Store(int32(len(w.watched)))
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.watched, token)
		w.n.Store(int32(len(w.watched)))
		w.mu.Unlock()
	}
}

func (w *ProgressWatch) watching() bool { return w != nil && w.n.Load() > 0 }

// take hands msg to its watcher when it is progress under a watched token.
func (w *ProgressWatch) take(msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.ID.IsValid() || req.Method != "notifications/progress" {
		return false
	}
	var p struct {
		Token any `json:"progressToken"`
	}
	if _, err := sjson.Parse(req.Params, &p, sjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return false
	}
	tok, ok := p.Token.(string)
	if !ok {
		return false
	}
	w.mu.Lock()
	seen := w.watched[tok]
	w.mu.Unlock()
	if seen == nil {
		return false
	}
	seen(req.Params)
	return true
}
