package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// Transparent egress through a gate: where the node cannot open sockets in a
// sandbox's network (gVisor keeps its own network stack), the sandbox's gate —
// the node's own binary, started inside before the tool (bridge.go) — listens for
// it and relays to the plugin's proxy socket, and the node keeps every decision:
//
//   - The gate opens a control connection (gateMagic) and sends each DNS query the
//     sandbox asks of it; the node answers it as it answers in a namespace it
//     serves itself (the same names, addresses, lists and cap), and before the
//     answer tells the gate which (address, port) pairs to listen on.
//   - Each connection the gate accepts on such a listener it relays as one
//     connection to the proxy socket, opened with relayMagic and the address the
//     client connected to. The node takes that address only as a key into the
//     names it handed out to this endpoint: a name it never handed out, or one the
//     lists no longer allow on that port, is refused and audited. What is relayed
//     can therefore reach nothing a CONNECT through the same socket could not, so
//     a tool speaking this protocol itself on the socket (which is bound into its
//     sandbox) gains nothing.
//
// Frames: a 2-byte big-endian length, then the payload. Gate to node: a DNS query
// message. Node to gate: a type byte, then 'L' + 4-byte IPv4 address + 2-byte port
// (listen there), or 'A' + the DNS answer for the oldest query not yet answered
// (an empty answer: none, drop the query).
const (
	gateMagic  = "\x00oz0-gate\n"
	relayMagic = "\x00oz0-relay\n"
	// relayHeaderLen is relayMagic and the address: IPv4 and port.
	relayHeaderLen = len(relayMagic) + 6

	frameListen = 'L'
	frameAnswer = 'A'

	// maxGatesPerEndpoint bounds the control connections one endpoint serves (one
	// per sandbox using it).
	maxGatesPerEndpoint = 64
)

// readUnixPrefix reads until buf holds at least n bytes (or the header timeout
// set by the caller passes).
func readUnixPrefix(c net.Conn, buf []byte, n int) ([]byte, error) {
	tmp := make([]byte, 512)
	for len(buf) < n {
		k, err := c.Read(tmp)
		buf = append(buf, tmp[:k]...)
		if err != nil && len(buf) < n {
			return buf, err
		}
	}
	return buf, nil
}

// gateTransparent is the endpoint's resolver state, made at its first gate.
func (p *Proxy) gateTransparent(ep *endpoint) *transparent {
	for {
		if tr := ep.tr.Load(); tr != nil {
			return tr
		}
		tr := newTransparent(p, ep, netnsOpener{})
		if ep.tr.CompareAndSwap(nil, tr) {
			if p.endpointGone(ep) {
				ep.tr.CompareAndSwap(tr, nil)
				tr.close()
				return nil
			}
			return tr
		}
	}
}

// serveGate answers a gate's DNS queries over its control connection until it
// ends. first is what was read of the connection so far.
func (p *Proxy) serveGate(s *session, first []byte) {
	c := s.conn
	refuse := func(why string) {
		p.log.Warn("egress gate refused", "plugin", s.plugin.name, "server", s.server, "why", why)
	}
	if s.ep == nil {
		refuse("no endpoint")
		return
	}
	tr := p.gateTransparent(s.ep)
	if tr == nil {
		return
	}
	tr.mu.Lock()
	if tr.closed || len(tr.gates) >= maxGatesPerEndpoint {
		full := !tr.closed
		tr.mu.Unlock()
		if full {
			refuse(fmt.Sprintf("the endpoint already serves %d gates", maxGatesPerEndpoint))
		}
		return
	}
	tr.gates[s] = struct{}{}
	tr.mu.Unlock()
	defer func() {
		tr.mu.Lock()
		delete(tr.gates, s)
		tr.mu.Unlock()
	}()
	c.SetReadDeadline(time.Time{})
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(first[len(gateMagic):]), c))
	told := map[netip.AddrPort]bool{}
	var hdr [2]byte
	buf := make([]byte, 0, 512)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return
		}
		var out []byte
		req := new(dns.Msg)
		if req.Unpack(buf) == nil {
			var listens []netip.AddrPort
			m := answer(req, func(qname string) (netip.Addr, int) {
				a, ports, rcode := tr.resolve(qname)
				for _, port := range ports {
					if ap := netip.AddrPortFrom(a, uint16(port)); !told[ap] {
						told[ap] = true
						listens = append(listens, ap)
					}
				}
				return a, rcode
			})
			for _, ap := range listens {
				a4 := ap.Addr().As4()
				out = appendFrame(out, frameListen, append(a4[:], byte(ap.Port()>>8), byte(ap.Port())))
			}
			packed, err := m.Pack()
			if err != nil {
				packed = nil
			}
			out = appendFrame(out, frameAnswer, packed)
		} else {
			out = appendFrame(out, frameAnswer, nil) // not DNS: the gate drops it
		}
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func appendFrame(out []byte, typ byte, payload []byte) []byte {
	n := 1 + len(payload)
	out = append(out, byte(n>>8), byte(n), typ)
	return append(out, payload...)
}

// serveRelayed serves one connection a gate relays: the address the client
// connected to, then the client's bytes.
func (p *Proxy) serveRelayed(s *session, first []byte) {
	h := first[len(relayMagic):relayHeaderLen]
	ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte(h[:4])), binary.BigEndian.Uint16(h[4:6]))
	var host string
	if s.ep != nil {
		if tr := s.ep.tr.Load(); tr != nil {
			host = tr.host(ap.Addr())
		}
	}
	if host == "" {
		p.record(s, Target{Host: ap.Addr().String(), Port: int(ap.Port())}, "deny", "",
			"transparent: "+ap.Addr().String()+" is no address the node's resolver gave this sandbox", 0)
		return
	}
	s.conn.SetReadDeadline(time.Time{})
	p.serveTransparentWith(s, Target{Host: host, Port: int(ap.Port())}, first[relayHeaderLen:])
}

// serveControl serves a unix-socket connection that opened with a NUL byte: a
// bridge's listener handoff, a gate's control connection, or a connection a gate
// relays. Descriptors come only with a handoff.
func (p *Proxy) serveControl(s *session, c *net.UnixConn, first []byte, fds []int) {
	if bytes.HasPrefix(first, []byte(handoffMagic)) || len(fds) > 0 {
		p.serveHandoff(s, c, first, fds)
		return
	}
	first, err := readUnixPrefix(c, first, len(gateMagic))
	if err == nil && bytes.HasPrefix(first, []byte(gateMagic)) {
		p.serveGate(s, first)
		return
	}
	if err == nil {
		first, err = readUnixPrefix(c, first, relayHeaderLen)
	}
	switch {
	case err != nil:
	case bytes.HasPrefix(first, []byte(relayMagic)):
		p.serveRelayed(s, first)
	default:
		p.serveHandoff(s, c, first, nil) // refused there as malformed
	}
}
