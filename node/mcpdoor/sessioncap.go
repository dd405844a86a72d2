package mcpdoor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/peer"
)

// MCP sessions are bounded in number, not only by their idle time (an abandoned
// session costs the node ~20 KiB until it expires): in total and per client (a
// process on the node's sockets, a user on --mcp-listen). A new session past a
// cap closes the session idle longest (of that client, for its cap): one with
// no request in flight and, on the HTTP door, no stream open. When none is idle
// the new session is the one closed. Each eviction is counted (metric) and
// reported (session-cap).

// capSession is one open MCP session as the caps count it.
type capSession struct {
	id     string // the HTTP door's session id ("" for a stdio connection)
	client string
	last   atomic.Int64 // its last request, stream or byte (Unix nanoseconds)
	busy   int          // its requests (and streams) in flight
	close  func()       // ends it
}

// sessionCaps holds the open sessions of every MCP door.
type sessionCaps struct {
	total, perClient int
	met              *metrics.Caps
	raise            func(api.Finding)
	// live lists the ids of the HTTP door's sessions the SDK still holds, to
	// forget those it ended itself (idle timeout); end closes one.
	live func() map[string]bool
	end  func(id string)

	mu       sync.Mutex
	all      map[*capSession]struct{}
	byID     map[string]*capSession
	reported map[string]time.Time // cap → when last raised
}

func newSessionCaps(total, perClient int, met *metrics.Caps, raise func(api.Finding), live func() map[string]bool, end func(string)) *sessionCaps {
	return &sessionCaps{total: total, perClient: perClient, met: met, raise: raise, live: live, end: end,
		all: map[*capSession]struct{}{}, byID: map[string]*capSession{}, reported: map[string]time.Time{}}
}

// add counts a new session and closes what the caps require; it reports whether
// the new session itself was closed.
func (s *sessionCaps) add(n *capSession) (closed bool) {
	n.last.Store(time.Now().UnixNano())
	s.mu.Lock()
	s.all[n] = struct{}{}
	if n.id != "" {
		s.byID[n.id] = n
	}
	var victims []*capSession
	var caps []string
	if len(s.all) > s.total || s.clientCount(n.client) > s.perClient {
		s.pruneLocked()
	}
	for len(s.all) > s.total {
		v := s.oldestIdle("", n)
		victims, caps = append(victims, v), append(caps, "total")
		s.removeLocked(v)
	}
	for s.clientCount(n.client) > s.perClient {
		v := s.oldestIdle(n.client, n)
		victims, caps = append(victims, v), append(caps, "client")
		s.removeLocked(v)
	}
	count := len(s.all)
	s.mu.Unlock()
	s.met.Sessions(count)
	for i, v := range victims {
		s.met.SessionEvicted(caps[i])
		s.report(caps[i], v, n.client)
		v.close()
		closed = closed || v == n
	}
	return closed
}

// clientCount is how many sessions client holds. s.mu is held.
func (s *sessionCaps) clientCount(client string) int {
	n := 0
	for c := range s.all {
		if c.client == client {
			n++
		}
	}
	return n
}

// oldestIdle is the session idle longest (of client, if given), not busy; n,
// the new one, when none is.
func (s *sessionCaps) oldestIdle(client string, n *capSession) *capSession {
	var v *capSession
	for c := range s.all {
		if c == n || c.busy > 0 || client != "" && c.client != client {
			continue
		}
		if v == nil || c.last.Load() < v.last.Load() {
			v = c
		}
	}
	if v == nil {
		return n
	}
	return v
}

// pruneLocked forgets the HTTP sessions the SDK no longer holds. s.mu is held.
func (s *sessionCaps) pruneLocked() {
	if s.live == nil || len(s.byID) == 0 {
		return
	}
	live := s.live()
	for id, c := range s.byID {
		if !live[id] {
			s.removeLocked(c)
		}
	}
}

func (s *sessionCaps) removeLocked(c *capSession) {
	delete(s.all, c)
	if c.id != "" && s.byID[c.id] == c {
		delete(s.byID, c.id)
	}
}

// remove forgets a session that ended.
func (s *sessionCaps) remove(c *capSession) {
	s.mu.Lock()
	s.removeLocked(c)
	count := len(s.all)
	s.mu.Unlock()
	s.met.Sessions(count)
}

// prune forgets the sessions the SDK ended by itself, and sets the gauge.
func (s *sessionCaps) prune() {
	s.mu.Lock()
	s.pruneLocked()
	count := len(s.all)
	s.mu.Unlock()
	s.met.Sessions(count)
}

// run prunes every interval until ctx ends.
func (s *sessionCaps) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.prune()
		}
	}
}

// begin marks a request of session id in flight; done ends it.
func (s *sessionCaps) begin(id string) (done func()) {
	s.mu.Lock()
	c := s.byID[id]
	if c != nil {
		c.busy++
		c.last.Store(time.Now().UnixNano())
	}
	s.mu.Unlock()
	return func() {
		if c == nil {
			return
		}
		s.mu.Lock()
		c.busy--
		s.mu.Unlock()
		c.last.Store(time.Now().UnixNano())
	}
}

// report raises the finding at most once a minute per cap.
func (s *sessionCaps) report(capName string, v *capSession, client string) {
	s.mu.Lock()
	due := time.Since(s.reported[capName]) >= time.Minute
	if due {
		s.reported[capName] = time.Now()
	}
	s.mu.Unlock()
	if !due || s.raise == nil {
		return
	}
	since := time.Unix(0, v.last.Load()).UTC().Format(time.RFC3339)
	msg := fmt.Sprintf("the MCP doors reached their cap of %d open sessions: the session idle longest (of %s, idle since %s) was closed", s.total, v.client, since)
	if capName == "client" {
		msg = fmt.Sprintf("%s reached the cap of %d open MCP sessions for one client: its session idle longest (idle since %s) was closed", client, s.perClient, since)
	}
	s.raise(api.Finding{Code: api.CodeSessionCap, Severity: api.SevWarning, Subject: "mcp-sessions/" + capName, Message: msg,
		Fix: "find the client that opens sessions and never ends them (oz0-node logs); raise --mcp-session-cap or --mcp-session-cap-per-client if it needs more"})
}

// tracked counts the HTTP door's sessions: a request with no session id that
// comes back with one made a session; one with an id is a request of it in
// flight (a GET stream: for as long as it is open).
func (s *sessionCaps) tracked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Mcp-Session-Id"); id != "" {
			done := s.begin(id)
			defer done()
			next.ServeHTTP(w, r)
			if r.Method == http.MethodDelete {
				s.mu.Lock()
				if c := s.byID[id]; c != nil {
					s.removeLocked(c)
				}
				s.mu.Unlock()
			}
			return
		}
		next.ServeHTTP(w, r)
		id := w.Header().Get("Mcp-Session-Id")
		if id == "" || r.Method != http.MethodPost {
			return
		}
		client := "unknown"
		if c := peer.ConnOf(r.Context()); c != nil {
			_, client = peer.Who(c)
		}
		s.add(&capSession{id: id, client: client, close: func() { s.end(id) }})
	})
}

// listener counts each connection of the stdio door as a session.
func (s *sessionCaps) listener(ln net.Listener) net.Listener {
	return &sessListener{Listener: ln, s: s}
}

type sessListener struct {
	net.Listener
	s *sessionCaps
}

func (l *sessListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		_, client := peer.Who(c)
		sc := &sessConn{Conn: c, s: l.s}
		sc.cs = &capSession{client: client, close: func() { c.Close() }}
		if l.s.add(sc.cs) {
			continue // over a cap with no idle session to close: this one goes
		}
		return sc, nil
	}
}

// sessConn is a stdio session: its reads and writes are its activity.
type sessConn struct {
	net.Conn
	s    *sessionCaps
	cs   *capSession
	once sync.Once
}

func (c *sessConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *sessConn) Write(p []byte) (int, error) {
	c.touch()
	return c.Conn.Write(p)
}

func (c *sessConn) touch() { c.cs.last.Store(time.Now().UnixNano()) }

func (c *sessConn) Close() error {
	c.once.Do(func() { c.s.remove(c.cs) })
	return c.Conn.Close()
}

// Unwrap is the connection accepted.
func (c *sessConn) Unwrap() net.Conn { return c.Conn }
