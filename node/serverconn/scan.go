package serverconn

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MaxAsked bounds the unanswered request ids a connection remembers.
const MaxAsked = 1 << 14

// AskedIDs are the ids of the requests the node sent a server and it has not
// answered yet. Its own lock: the reading never waits on a write blocked by a
// full pipe.
type AskedIDs struct {
	mu  sync.Mutex
	ids map[jsonrpc.ID]struct{}
}

// Add remembers msg's id if it is a request (not a notification).
func (a *AskedIDs) Add(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		a.AddID(req.ID)
	}
}

// AddID remembers the id of a request.
func (a *AskedIDs) AddID(id jsonrpc.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil || len(a.ids) >= MaxAsked {
		// Requests never answered (a server that hangs) are forgotten in bulk;
		// a late answer to one then only costs the server's rate.
		a.ids = map[jsonrpc.ID]struct{}{}
	}
	a.ids[id] = struct{}{}
}

// Answered reports whether id is that of a request the node sent and the server
// had not answered yet, and forgets it.
func (a *AskedIDs) Answered(id jsonrpc.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.ids[id]; ok {
		delete(a.ids, id)
		return true
	}
	return false
}

// Notification reports whether a message is certainly a notification: an object
// whose plain top-level keys include "method" and not "id". What the scan cannot
// tell is decoded and judged.
func (t TopKeys) Notification() bool { return t.plain && t.method && !t.hasID }

// ResponseID reports whether a message is certainly a response (an object whose
// top-level keys, none of them escaped nor a case variant of "id" or "method",
// include "id" and not "method") with an id the bytes give as the decoder would
// (an integer of at most 15 digits or a string without escapes), and returns that
// id. What it cannot tell is decoded.
func (t TopKeys) ResponseID() (jsonrpc.ID, bool) {
	if !t.plain {
		return jsonrpc.ID{}, false
	}
	return t.idSoFar()
}

// idSoFar is ResponseID for the start of a message cut short: its id when no
// "method" came before the cut (what follows it is not known).
func (t TopKeys) idSoFar() (jsonrpc.ID, bool) {
	if t.method || len(t.id) == 0 {
		return jsonrpc.ID{}, false
	}
	if t.id[0] == '"' {
		v, err := jsonrpc.MakeID(string(t.id[1 : len(t.id)-1]))
		return v, err == nil
	}
	if len(t.id) > 15 {
		return jsonrpc.ID{}, false
	}
	n, err := strconv.ParseInt(string(t.id), 10, 64)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	v, err := jsonrpc.MakeID(float64(n))
	return v, err == nil
}

// NoMessage reports whether a line is certainly no JSON-RPC message: not an
// object, or one whose plain top-level keys include neither "id" nor "method".
func (t TopKeys) NoMessage() bool { return t.notObject || t.plain && !t.method && !t.hasID }

// TopKeys is what ScanTop finds of a message's top-level keys.
type TopKeys struct {
	notObject bool   // the line does not start with an object
	plain     bool   // an object whose keys are unescaped and no case variant of "id" or "method"
	method    bool   // it has "method"
	hasID     bool   // it has "id"
	id        []byte // the id's value when an integer or a string without escapes
}

// ScanTop reads a message's top-level keys once, allocating nothing, so a flood
// is judged for less than decoding it would cost.
func ScanTop(msg []byte) TopKeys {
	if i := bytes.IndexFunc(msg, func(r rune) bool { return r != ' ' && r != '\t' && r != '\r' }); i < 0 || msg[i] != '{' {
		return TopKeys{notObject: true}
	}
	var t TopKeys
	depth, inStr, esc := 0, false, false
	key := -1 // start of the top-level key being read
	wantKey, afterID := false, false
	idStr := -1 // start of the id's string
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
				if key >= 0 {
					return TopKeys{}
				}
				if idStr >= 0 {
					idStr = -1 // an escaped id is left to the decoder
					t.id = nil
				}
			case c == '"':
				inStr = false
				if idStr >= 0 {
					t.id, idStr = msg[idStr-1:i+1], -1
				}
				if key >= 0 {
					k := msg[key:i]
					switch {
					case string(k) == "id":
						t.hasID, afterID, t.id = true, true, nil
					case string(k) == "method":
						t.method = true
					case bytes.EqualFold(k, []byte("id")) || bytes.EqualFold(k, []byte("method")):
						return TopKeys{}
					}
					key = -1
				}
			}
			continue
		}
		if afterID && c != ':' && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			afterID = false
			switch {
			case c == '"':
				idStr = i + 1
			case c == '-' || c >= '0' && c <= '9':
				j := i + 1
				for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
					j++
				}
				if j < len(msg) && (msg[j] == '.' || msg[j] == 'e' || msg[j] == 'E') {
					break // a fraction or exponent is left to the decoder
				}
				t.id = msg[i:j]
			}
		}
		switch c {
		case '"':
			inStr = true
			if depth == 1 && wantKey {
				key, wantKey = i+1, false
			}
		case '{', '[':
			depth++
			if depth == 1 {
				if c != '{' {
					return TopKeys{}
				}
				wantKey = true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				wantKey = true
			}
		}
	}
	t.plain = depth == 0 && !inStr
	return t
}
