package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"code.dny.dev/ssrf"

	"oz0.ai/node/node/netrule"
)

// GuardError is a dial refused because an address is in a range no plugin may reach.
type GuardError struct {
	Host string
	Addr netip.Addr
}

func (e *GuardError) Error() string {
	return fmt.Sprintf("%s resolves to %s, a loopback, private, link-local, CGNAT, ULA, multicast, reserved or IPv4-embedding address that no list can allow", e.Host, e.Addr)
}

// guard decides whether an address may be dialled. Both netrule.Forbidden and
// code.dny.dev/ssrf must agree an address is public (their tables are tested to
// agree; two independent tables guard against a gap in either). AllowCIDRs, an
// operator's choice, opens ranges in spite of both.
type guard struct {
	allow []netip.Prefix
	ssrf  *ssrf.Guardian
}

func newGuard(allow []netip.Prefix) *guard {
	return &guard{allow: allow, ssrf: ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())}
}

func (g *guard) operatorAllows(a netip.Addr) bool {
	u := a.Unmap().WithZone("")
	for _, p := range g.allow {
		if p.Contains(u) {
			return true
		}
	}
	return false
}

func (g *guard) ok(a netip.Addr) bool {
	if g.operatorAllows(a) {
		return true
	}
	return !netrule.Forbidden(a) && g.ssrf.SafeAddr(a.WithZone("")) == nil
}

// control is the net.Dialer hook: it sees the socket address actually connected to,
// so no resolution between check and connect can change it.
func (g *guard) control(host string) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("dial %s: cannot check address %q: %w", host, address, err)
		}
		if !g.ok(ap.Addr()) {
			return &GuardError{Host: host, Addr: ap.Addr()}
		}
		return nil
	}
}

// dial resolves t (unless it is an address), refuses the whole target if any
// address is out of reach, then connects to the checked addresses in turn. It
// returns the connection and the address it reached.
func (p *Proxy) dial(ctx context.Context, t Target) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if t.IP.IsValid() {
		addrs = []netip.Addr{t.IP}
	} else {
		res, err := p.cfg.Resolver(ctx, t.Host)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("resolve %s: %w", t.Host, err)
		}
		for _, a := range res {
			addrs = append(addrs, a.Unmap())
		}
	}
	if len(addrs) == 0 {
		return nil, netip.Addr{}, fmt.Errorf("resolve %s: no addresses", t.Host)
	}
	// One private answer among public ones is a rebinding attempt or a
	// misconfiguration; either way nothing of that name is dialled.
	for _, a := range addrs {
		if !p.guard.ok(a) {
			return nil, a, &GuardError{Host: t.Host, Addr: a}
		}
	}
	d := net.Dialer{Control: p.guard.control(t.Host), KeepAlive: p.cfg.KeepAlive}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.Port)).String())
		if err == nil {
			return c, a, nil
		}
		var ge *GuardError
		if errors.As(err, &ge) {
			return nil, a, ge
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, addrs[0], fmt.Errorf("connect %s: %w", t, errors.Join(errs...))
}

func defaultResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}
