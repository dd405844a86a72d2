package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/netrule"
)

// Transparent egress serves clients that ignore the proxy variables (raw TCP,
// databases, WebSocket and JVM clients). The sandbox's resolver is the node: it
// answers DNS on the sandbox's own loopback, and only for names the plugin (or
// server) may reach now, each with an address of the sandbox's loopback range,
// allocated on first ask and kept for the sandbox's life. For every port the lists
// allow for that name, the node listens on (address, port) inside the sandbox; a
// connection there is a CONNECT to name:port decided at accept time, and takes the
// proxy's decision, address guard, audit and tunnel-cutting path. Every other name
// is NXDOMAIN. The answering code has no upstream: it never forwards a query, and
// the names it answers are resolved by the proxy only when a connection is made.

const (
	// dnsTTL is short so clients ask again soon after a list changes.
	dnsTTL = 5
	// MaxTransparentNames bounds the names one sandbox gets addresses for: a tool
	// asking for endless unique names under an allowed suffix gets REFUSED past it.
	MaxTransparentNames = 256
	// dnsPort is where the sandbox's resolv.conf points.
	dnsPort = 53
)

// portlessDefaults are the ports listened on for a name whose matching manifest
// and tenant entries name no port at all (the web's).
var portlessDefaults = []int{80, 443}

// nameBase is the start of the range names' addresses come from (127.77.0.0/16).
var nameBase = [4]byte{127, 77, 0, 0}

// netnsOpener opens sockets inside one sandbox's network namespace.
type netnsOpener struct {
	tcp func(addr string) (net.Listener, error)
	udp func(addr string) (net.PacketConn, error)
}

// transparent is one endpoint's resolver state: the names it handed out and, when
// the node serves inside the sandbox's namespace itself, the sockets it opened
// there. A sandbox whose namespace the node cannot enter (gVisor) is served
// through its gate instead (transparent_gate.go): the same names, decisions and
// cap, with the listening done inside by the gate on the node's word.
type transparent struct {
	p    *Proxy
	ep   *endpoint
	open netnsOpener // zero when a gate listens inside

	mu      sync.Mutex
	names   map[string]netip.Addr
	hosts   map[netip.Addr]string // names by address, for connections a gate relays
	lns     map[netip.AddrPort]net.Listener
	servers []*dns.Server
	gates   map[*session]struct{} // gates' control connections
	closed  bool
	capped  bool
}

func newTransparent(p *Proxy, ep *endpoint, open netnsOpener) *transparent {
	return &transparent{p: p, ep: ep, open: open, names: map[string]netip.Addr{}, hosts: map[netip.Addr]string{},
		lns: map[netip.AddrPort]net.Listener{}, gates: map[*session]struct{}{}}
}

// allowedPorts are the ports name may be reached on now under the lists: the
// ports the matching manifest (and server) and tenant entries name, or the web's
// when none names any, each kept only where the whole decision allows it.
func allowedPorts(r *compiled, server string, tl *tenantList, host string, operatorAllows func(netip.Addr) bool) []int {
	var cand []int
	collect := func(ps []netrule.Pattern) {
		for _, pt := range ps {
			ports := pt.Ports
			pt.Ports = nil
			if pt.Match(host, 0) {
				cand = append(cand, ports...)
			}
		}
	}
	collect(r.egress)
	if server != "" {
		collect(r.servers[server])
	}
	collect(tl.patterns)
	if len(cand) == 0 {
		cand = portlessDefaults
	}
	slices.Sort(cand)
	cand = slices.Compact(cand)
	var out []int
	for _, port := range cand {
		if decide(r, server, tl, Target{Host: host, Port: port}, operatorAllows).allow {
			out = append(out, port)
		}
	}
	return out
}

// startTransparent opens the sandbox's resolver (UDP and TCP on resolver:53) for ep.
func (p *Proxy) startTransparent(ep *endpoint, open netnsOpener, resolver netip.Addr) (*transparent, error) {
	t := newTransparent(p, ep, open)
	addr := netip.AddrPortFrom(resolver, dnsPort).String()
	pc, err := open.udp(addr)
	if err != nil {
		return nil, fmt.Errorf("sandbox resolver: %w", err)
	}
	ln, err := open.tcp(addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("sandbox resolver: %w", err)
	}
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: t, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second},
		{Listener: ln, Handler: t, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxTCPQueries: 64},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		go func() { errc <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			t.close()
			pc.Close()
			ln.Close()
			return nil, fmt.Errorf("sandbox resolver on %s: %w", addr, err)
		}
		t.servers = append(t.servers, srv)
	}
	return t, nil
}

// ServeDNS answers one query from the sandbox. It never forwards anything.
func (t *transparent) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	w.WriteMsg(answer(req, func(qname string) (netip.Addr, int) {
		a, ports, rcode := t.resolve(qname)
		if rcode == dns.RcodeSuccess {
			t.listen(a, ports)
		}
		return a, rcode
	}))
}

// answer is the reply to one query, with resolve deciding its name. It never
// forwards anything.
func answer(req *dns.Msg, resolve func(qname string) (netip.Addr, int)) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET:
		m.Rcode = dns.RcodeFormatError
	default:
		q := req.Question[0]
		a, rcode := resolve(q.Name)
		m.Rcode = rcode
		if rcode == dns.RcodeSuccess && q.Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
				A:   a.AsSlice(),
			}}
		}
		// Other types of an answered name: it exists, with no such record.
	}
	return m
}

// resolve decides a name and, when it may be reached, returns its address (given
// on first ask, kept for the endpoint's life) and the ports it may be reached on.
func (t *transparent) resolve(qname string) (netip.Addr, []int, int) {
	host, err := netrule.CanonicalHost(strings.TrimSuffix(qname, "."))
	if err != nil || host == "" {
		return netip.Addr{}, nil, dns.RcodeNameError
	}
	if _, err := netrule.ParseIPLiteral(host); err == nil {
		return netip.Addr{}, nil, dns.RcodeNameError
	}
	pl := t.ep.plugin
	ports := allowedPorts(pl.rules.Load(), t.ep.server, t.p.tenant.Load(), host, t.p.guard.operatorAllows)
	if len(ports) == 0 {
		return netip.Addr{}, nil, dns.RcodeNameError
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return netip.Addr{}, nil, dns.RcodeServerFailure
	}
	a, ok := t.names[host]
	if !ok {
		n := len(t.names) + 1
		if n > MaxTransparentNames {
			if !t.capped {
				t.capped = true
				t.p.nameCapReached(pl.name, t.ep.server)
			}
			return netip.Addr{}, nil, dns.RcodeRefused
		}
		a = netip.AddrFrom4([4]byte{nameBase[0], nameBase[1], byte(n >> 8), byte(n)})
		t.names[host] = a
		t.hosts[a] = host
	}
	return a, ports, dns.RcodeSuccess
}

// host is the name the node handed out address a for ("" if none).
func (t *transparent) host(a netip.Addr) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hosts[a]
}

// listen opens, inside the sandbox's namespace, the listeners of a name's address
// on its ports that are not open yet.
func (t *transparent) listen(a netip.Addr, ports []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.open.tcp == nil {
		return
	}
	host := t.hosts[a]
	for _, port := range ports {
		ap := netip.AddrPortFrom(a, uint16(port))
		if t.lns[ap] != nil {
			continue
		}
		ln, err := t.open.tcp(ap.String())
		if err != nil {
			t.p.log.Warn("egress: transparent listener failed", "plugin", t.ep.plugin.name, "server", t.ep.server, "host", host, "addr", ap, "err", err)
			continue
		}
		t.lns[ap] = ln
		target := Target{Host: host, Port: port}
		if !t.p.startAccept(t.ep, ln, func(s *session) { t.p.serveTransparent(s, target) }) {
			ln.Close()
		}
	}
}

func (t *transparent) close() {
	t.mu.Lock()
	t.closed = true
	lns, servers, gates := t.lns, t.servers, t.gates
	t.lns, t.servers, t.gates = nil, nil, nil
	t.mu.Unlock()
	for s := range gates {
		s.kill("endpoint closed")
	}
	for _, srv := range servers {
		srv.Shutdown()
	}
	for _, ln := range lns {
		ln.Close()
	}
}

// serveTransparent is a CONNECT to t taken at accept time: the same decision,
// guard, audit and revocation as a proxied one. A refused client's connection is
// closed (it has no protocol to read a reason in); the audit log holds the reason.
func (p *Proxy) serveTransparent(s *session, t Target) { p.serveTransparentWith(s, t, nil) }

// serveTransparentWith is serveTransparent for a client that already sent pre
// (read with a gate's relay header).
func (p *Proxy) serveTransparentWith(s *session, t Target, pre []byte) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := p.check(s, t, cancel)
	if !v.allow {
		return
	}
	up, addr, err := p.dial(ctx, t)
	if err != nil {
		p.dialFailed(s, t, addr, v, err, func(int, string) {})
		return
	}
	if !s.attach(up) {
		up.Close()
		p.record(s, t, "end", addr.String(), s.killedWhy(), 0)
		return
	}
	p.record(s, t, "allow", addr.String(), v.rule, 0)
	if p.ca.Load() != nil && s.plugin.rules.Load().hasSecrets(s.server, t) {
		cin := bufio.NewReader(io.MultiReader(bytes.NewReader(pre), s.conn))
		n := p.intercept(s, t, v.rule, addr.String(), cin, up)
		p.record(s, t, "end", addr.String(), endRule(s, v.rule), n)
		return
	}
	var n int64
	if len(pre) > 0 {
		k, err := up.Write(pre)
		n = int64(k)
		if err != nil {
			up.Close()
			p.record(s, t, "end", addr.String(), endRule(s, v.rule), n)
			return
		}
	}
	n += p.tunnel(s.conn, up, nil)
	p.record(s, t, "end", addr.String(), endRule(s, v.rule), n)
}

// nameCapReached logs and raises the finding of a sandbox that asked for more
// names than it may have addresses for (e.g. data encoded in names).
func (p *Proxy) nameCapReached(plugin, server string) {
	subject := plugin
	if server != "" {
		subject += "/" + server
	}
	p.log.Warn("egress: sandbox asked for more names than it may have addresses for; further new names are refused",
		"plugin", plugin, "server", server, "max", MaxTransparentNames)
	f := api.Finding{
		Code:     api.CodeEgressNameCap,
		Severity: api.SevWarning,
		Subject:  subject,
		Message: fmt.Sprintf("a sandbox of %s asked the node's resolver for more than %d distinct allowed names; "+
			"further new names are refused (many unique names under an allowed suffix can carry data out)", subject, MaxTransparentNames),
		Fix:  "check what the plugin resolves; narrow its wildcard entries in the manifest or the tenant list",
		Time: time.Now().UTC().Format(time.RFC3339),
	}
	p.mu.Lock()
	p.nameCaps[subject] = f
	p.mu.Unlock()
}
