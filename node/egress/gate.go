package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Gate is the sandbox's side of transparent egress where the node cannot listen
// in the sandbox's network itself (transparent_gate.go): it answers the sandbox's
// DNS on the resolver address by asking the node, listens where the node says,
// and relays each connection to the plugin's proxy socket with the address it was
// made to. It decides nothing: the node answers every name and decides every
// connection. It runs in the in-sandbox bridge before the tool starts (gVisor),
// or in `oz0-node exec`, which opens its sockets inside the sandbox's namespace.
type Gate struct {
	// Socket is the plugin's proxy socket (as the gate sees it).
	Socket string
	// Resolver is the address the sandbox's resolv.conf names.
	Resolver netip.Addr
	// Listen and ListenPacket open sockets in the sandbox's network; nil: the
	// caller's own (the gate runs inside).
	Listen       func(addr string) (net.Listener, error)
	ListenPacket func(addr string) (net.PacketConn, error)
	// Logf reports what goes wrong; nil: nothing.
	Logf func(format string, args ...any)

	ctl     net.Conn
	wmu     sync.Mutex // writes on ctl
	mu      sync.Mutex // pending, dead
	pending []func([]byte)
	dead    bool
	closers []io.Closer
	lmu     sync.Mutex
	lns     map[netip.AddrPort]bool
}

const (
	// maxGatePending bounds the queries waiting for the node; more are answered
	// SERVFAIL at once, so a flood of queries holds no memory.
	maxGatePending = 256
	// maxGateDNSConns bounds concurrent DNS-over-TCP clients.
	maxGateDNSConns = 16
	gateDNSIdle     = 10 * time.Second
)

// Start connects to the node and opens the resolver. The gate then runs until
// Close; when the node's end closes, queries are answered SERVFAIL.
func (g *Gate) Start() error {
	if g.Listen == nil {
		g.Listen = func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
	}
	if g.ListenPacket == nil {
		g.ListenPacket = func(addr string) (net.PacketConn, error) { return net.ListenPacket("udp", addr) }
	}
	if g.Logf == nil {
		g.Logf = func(string, ...any) {}
	}
	g.lns = map[netip.AddrPort]bool{}
	ctl, err := net.Dial("unix", g.Socket)
	if err != nil {
		return fmt.Errorf("gate: proxy socket %s: %w", g.Socket, err)
	}
	if _, err := io.WriteString(ctl, gateMagic); err != nil {
		ctl.Close()
		return fmt.Errorf("gate: proxy socket %s: %w", g.Socket, err)
	}
	g.ctl = ctl
	g.closers = append(g.closers, ctl)
	addr := netip.AddrPortFrom(g.Resolver, dnsPort).String()
	pc, err := g.ListenPacket(addr)
	if err != nil {
		g.Close()
		return fmt.Errorf("gate: resolver on udp %s: %w", addr, err)
	}
	g.closers = append(g.closers, pc)
	ln, err := g.Listen(addr)
	if err != nil {
		g.Close()
		return fmt.Errorf("gate: resolver on tcp %s: %w", addr, err)
	}
	g.closers = append(g.closers, ln)
	go g.readNode()
	go g.serveUDP(pc)
	go g.serveTCP(ln)
	return nil
}

// Close stops the gate's listeners and its control connection.
func (g *Gate) Close() {
	g.lmu.Lock()
	cs := g.closers
	g.closers = nil
	g.lmu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// ask sends one query to the node; reply gets the answer (nil: none). The
// answers come in the order the queries were written, so a query joins the queue
// and is written under one lock; readNode takes only the queue's own lock, so a
// write waiting on a full socket never holds up the reading of answers.
func (g *Gate) ask(q []byte, reply func([]byte)) {
	if len(q) > 0xffff {
		return
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.Lock()
	if g.dead {
		g.mu.Unlock()
		reply(servfail(q))
		return
	}
	if len(g.pending) >= maxGatePending {
		g.mu.Unlock()
		reply(servfail(q)) // a flood: the client may ask again
		return
	}
	g.pending = append(g.pending, reply)
	g.mu.Unlock()
	frame := append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)
	g.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := g.ctl.Write(frame); err != nil {
		g.ctl.Close() // readNode then answers what is queued
	}
}

// servfail is the answer to q when the node cannot be asked (nil if q is no DNS).
func servfail(q []byte) []byte {
	req := new(dns.Msg)
	if req.Unpack(q) != nil {
		return nil
	}
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeServerFailure)
	out, _ := m.Pack()
	return out
}

// readNode reads the node's frames: listen instructions, then each answer.
func (g *Gate) readNode() {
	br := bufio.NewReader(g.ctl)
	var hdr [2]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			break
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil || n == 0 {
			break
		}
		switch buf[0] {
		case frameListen:
			if n != 7 {
				g.Logf("oz0 gate: malformed listen frame from the node")
				continue
			}
			ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte(buf[1:5])), binary.BigEndian.Uint16(buf[5:7]))
			g.listen(ap)
		case frameAnswer:
			g.mu.Lock()
			var reply func([]byte)
			if len(g.pending) > 0 {
				reply, g.pending = g.pending[0], g.pending[1:]
			}
			g.mu.Unlock()
			if reply != nil && n > 1 {
				reply(buf[1:])
			}
		}
	}
	g.mu.Lock()
	g.dead = true
	pending := g.pending
	g.pending = nil
	g.mu.Unlock()
	for _, reply := range pending {
		reply(nil)
	}
}

// listen opens a name's listener (once) and relays what it accepts.
func (g *Gate) listen(ap netip.AddrPort) {
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.lns[ap] || g.closers == nil {
		return
	}
	ln, err := g.Listen(ap.String())
	if err != nil {
		g.Logf("oz0 gate: listen on %s: %v", ap, err)
		return
	}
	g.lns[ap] = true
	g.closers = append(g.closers, ln)
	go g.relay(ln)
}

// relay forwards each connection to the proxy socket, opened with the address
// the client connected to.
func (g *Gate) relay(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			local, ok := c.LocalAddr().(*net.TCPAddr)
			ap := netip.AddrPort{}
			if ok {
				ap = local.AddrPort()
			}
			a := ap.Addr().Unmap()
			if !a.Is4() {
				c.Close()
				return
			}
			up, err := net.Dial("unix", g.Socket)
			if err != nil {
				g.Logf("oz0 gate: proxy socket %s: %v", g.Socket, err)
				c.Close()
				return
			}
			a4 := a.As4()
			hdr := append([]byte(relayMagic), a4[:]...)
			hdr = append(hdr, byte(ap.Port()>>8), byte(ap.Port()))
			if _, err := up.Write(hdr); err != nil {
				c.Close()
				up.Close()
				return
			}
			bridgeConns(c, up)
		}()
	}
}

func (g *Gate) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		g.ask(q, func(a []byte) {
			if a != nil {
				pc.WriteTo(a, from)
			}
		})
	}
}

func (g *Gate) serveTCP(ln net.Listener) {
	sem := make(chan struct{}, maxGateDNSConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-sem }()
			defer c.Close()
			var wmu sync.Mutex
			var hdr [2]byte
			for {
				c.SetReadDeadline(time.Now().Add(gateDNSIdle))
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(hdr[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				g.ask(q, func(a []byte) {
					if a == nil {
						return
					}
					wmu.Lock()
					defer wmu.Unlock()
					c.SetWriteDeadline(time.Now().Add(5 * time.Second))
					c.Write(append([]byte{byte(len(a) >> 8), byte(len(a))}, a...))
				})
			}
		}()
	}
}
