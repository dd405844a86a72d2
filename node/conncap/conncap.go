// Package conncap bounds the connections the node's listeners hold, in total
// and per peer.
package conncap

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/peer"
)

// The node's listeners (the control and MCP sockets, --mcp-listen,
// --metrics-listen) share one budget of connections: in total, below the
// node's descriptor limit with a reserve left for plugin starts (each start takes
// a dozen descriptors: pipes, bind sources, a cgroup), and per peer (a user, on a
// loopback TCP listener too), so that one local user flooding a port neither
// starves the node nor the other users' clients. A connection over the budget
// is closed as it is accepted, counted, and reported (connection-cap).

// Budget is how many connections the listeners may hold: half the
// descriptor limit, the other half kept for plugins, their sandboxes and the
// egress proxy; per peer a quarter of that.
func Budget() (total, perPeer int) {
	limit := descriptorLimit()
	total = max(64, limit/2)
	return total, max(16, total/4)
}

// Limits counts the connections the node's listeners hold.
type Limits struct {
	total, perPeer int
	met            *metrics.Caps
	raise          func(api.Finding)

	mu       sync.Mutex
	open     int
	byPeer   map[string]int
	byLn     map[string]int
	reported map[string]time.Time // cap|listener → when last raised
}

func New(total, perPeer int, met *metrics.Caps, raise func(api.Finding)) *Limits {
	return &Limits{total: total, perPeer: perPeer, met: met, raise: raise,
		byPeer: map[string]int{}, byLn: map[string]int{}, reported: map[string]time.Time{}}
}

// take counts a new connection of peer on listener name; false when over a cap
// (which one: "total" or "peer").
func (l *Limits) take(name, peer string) (ok bool, capped string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.total:
		return false, "total"
	case l.byPeer[peer] >= l.perPeer:
		return false, "peer"
	}
	l.open++
	l.byPeer[peer]++
	l.byLn[name]++
	l.met.Conns(name, l.byLn[name])
	return true, ""
}

func (l *Limits) give(name, peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byPeer[peer]--; l.byPeer[peer] <= 0 {
		delete(l.byPeer, peer)
	}
	l.byLn[name]--
	l.met.Conns(name, l.byLn[name])
}

// refused counts a connection closed over a cap, and raises the finding at most
// once a minute per listener and cap.
func (l *Limits) refused(name, peer, capped string) {
	l.met.ConnRefused(name, capped)
	k := capped + "|" + name
	l.mu.Lock()
	last := l.reported[k]
	now := time.Now()
	due := now.Sub(last) >= time.Minute
	if due {
		l.reported[k] = now
	}
	open, mine := l.open, l.byPeer[peer]
	l.mu.Unlock()
	if !due || l.raise == nil {
		return
	}
	msg := fmt.Sprintf("the node's listeners hold %d connections, their cap (half the descriptor limit, the rest kept for plugins); new connections to %s are closed at once", open, name)
	if capped == "peer" {
		msg = fmt.Sprintf("%s holds %d connections to the node's listeners, the cap of one peer (%d); its new connections to %s are closed at once", peer, mine, l.perPeer, name)
	}
	l.raise(api.Finding{Code: api.CodeConnectionCap, Severity: api.SevWarning, Subject: name, Message: msg,
		Fix: "find the client that opens connections and does not close them (ss -tnp, or lsof on the socket)"})
}

// Wrap caps the connections ln accepts.
func (l *Limits) Wrap(ln net.Listener, name string) net.Listener {
	return &capListener{Listener: ln, lim: l, name: name}
}

type capListener struct {
	net.Listener
	lim  *Limits
	name string
}

func (c *capListener) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		who, _ := peer.Who(conn)
		if ok, capped := c.lim.take(c.name, who); !ok {
			conn.Close()
			c.lim.refused(c.name, who, capped)
			continue
		}
		cc := &capConn{Conn: conn}
		cc.release = func() { c.lim.give(c.name, who) }
		return cc, nil
	}
}

// capConn gives its place back when closed (once, however often Close is
// called).
type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap is the connection accepted.
func (c *capConn) Unwrap() net.Conn { return c.Conn }

// SyscallConn reaches the socket beneath (peer credentials).
func (c *capConn) SyscallConn() (syscall.RawConn, error) { return syscallConn(c.Conn) }

func syscallConn(c net.Conn) (syscall.RawConn, error) {
	if s, ok := peer.Underlying(c).(syscall.Conn); ok {
		return s.SyscallConn()
	}
	return nil, errors.New("not a socket")
}
