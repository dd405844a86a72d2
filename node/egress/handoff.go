package egress

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// Handoff: the in-sandbox bridge of a bwrap sandbox opens the loopback listener the
// proxy variables name, then passes that listening socket to the node over the
// plugin's proxy socket (SCM_RIGHTS) instead of relaying every byte itself. The
// node accepts connections on it directly, as it does on a listener it opened in
// the sandbox's namespace on a root node: one process and one hop fewer, without
// needing root. The socket comes from inside the sandbox, so the node takes only a
// listening TCP socket bound to loopback and serves it as the endpoint it arrived
// on: it cannot stand for another plugin. It holds the socket for as long as the
// bridge keeps the handoff connection open.

// handoffMagic opens a handoff message; its first byte is neither HTTP nor SOCKS.
const handoffMagic = "\x00oz0-handoff\n"

// maxHandoffsPerPlugin bounds the listeners a plugin can make the node hold.
const maxHandoffsPerPlugin = 16

// handoffReplyOK is the node's answer to an accepted handoff; anything else is a
// line saying why not.
const handoffReplyOK = "ok\n"

// readFirstUnix reads the first bytes of a unix-socket connection together with
// any descriptors passed with them.
func readFirstUnix(c *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, 512)
	oob := make([]byte, 64)
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	// On an error the counts can be negative.
	n, oobn = max(n, 0), max(oobn, 0)
	fds := parseRights(oob[:oobn])
	if n == 0 && err != nil {
		return nil, fds, err
	}
	return buf[:n], fds, nil
}

// serveHandoff takes a listener passed from a sandbox and serves it as the
// session's endpoint until the bridge closes the handoff connection.
func (p *Proxy) serveHandoff(s *session, c *net.UnixConn, first []byte, fds []int) {
	refuse := func(why string) {
		closeFDs(fds)
		p.log.Warn("egress handoff refused", "plugin", s.plugin.name, "server", s.server, "why", why)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "refused: %s\n", why)
	}
	if !bytes.Equal(first, []byte(handoffMagic)) {
		refuse("malformed handoff message")
		return
	}
	if len(fds) != 1 {
		refuse(fmt.Sprintf("%d descriptors passed, want one listening socket", len(fds)))
		return
	}
	fd := fds[0]
	fds = nil // listenerFromFD owns it now: closed there on failure, never twice
	ln, err := listenerFromFD(fd)
	if err != nil {
		refuse(err.Error())
		return
	}
	pl := s.plugin
	p.mu.Lock()
	if p.closed || pl.removed.Load() || pl.handoffs >= maxHandoffsPerPlugin {
		full := pl.handoffs >= maxHandoffsPerPlugin
		p.mu.Unlock()
		ln.Close()
		if full {
			refuse(fmt.Sprintf("plugin already has %d handed-off listeners", maxHandoffsPerPlugin))
		}
		return
	}
	pl.handoffs++
	p.wg.Add(1)
	p.mu.Unlock()
	ep := &endpoint{plugin: pl, server: s.server}
	go p.accept(ep, ln, nil, p.serveConn) // inside the sandbox: only it can connect
	defer func() {
		ln.Close()
		p.mu.Lock()
		pl.handoffs--
		p.mu.Unlock()
	}()
	p.log.Info("egress endpoint handed off", "plugin", pl.name, "server", s.server, "listener", ln.Addr().String())
	c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, handoffReplyOK); err != nil {
		return
	}
	// The bridge holds the connection open, silent, for as long as its sandbox
	// runs; its end, anything sent on it, or the session being killed ends the
	// listener.
	c.Read(make([]byte, 1))
}
