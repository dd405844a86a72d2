package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"oz0.ai/node/node/manifest"
)

// gateEnv is a proxy serving plugin gamma on a unix socket only, and a gate whose
// sockets live in a fresh network namespace: what a gVisor sandbox's gate does
// from inside, where the node cannot listen.
type gateEnv struct {
	*transparentEnv
	sock string
	gate *Gate
}

func newGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	nsPath, _ := newNetns(t)
	e := &transparentEnv{ns: nsPath}
	e.echo = echoServer(t)
	p := strconv.Itoa(int(e.echo.Port()))
	e.f = newFixture(t, true, func(c *Config) {
		c.Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if strings.HasSuffix(host, wildSuffix) {
				e.wildUp.Add(1)
			}
			return testResolver(ctx, host)
		}
	})
	writeTenant(t, e.f.tenant, testTenant+wildSuffix+":"+p+"\n")
	time.Sleep(100 * time.Millisecond)
	sock := filepath.Join(t.TempDir(), "gamma", "egress.sock")
	rules := PluginRules{Plugin: "gamma", Egress: []manifest.EgressEntry{
		{Host: hostBoth, Ports: []int{int(e.echo.Port())}}, {Host: hostManifest}, {Host: wildSuffix},
	}}
	if _, err := e.f.p.AddPlugin(rules, Listen{Socket: sock}); err != nil {
		t.Fatal(err)
	}
	g := &Gate{Socket: sock, Resolver: netip.MustParseAddr("127.0.0.53"),
		Listen:       func(addr string) (net.Listener, error) { return ListenInNetns(nsPath, addr) },
		ListenPacket: func(addr string) (net.PacketConn, error) { return listenPacketInNetns(nsPath, addr) },
		Logf:         t.Logf,
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return &gateEnv{transparentEnv: e, sock: sock, gate: g}
}

// Through a gate, as in the node's own namespace: only names both lists allow
// resolve, each to the sandbox's 127.77/16, and a plain TCP client reaches the
// host by name with the proxy's decision and audit.
func TestGateResolvesOnlyAllowedNamesAndRelaysRawTCP(t *testing.T) {
	e := newGateEnv(t)
	var addr netip.Addr
	for _, network := range []string{"udp", "tcp"} {
		m := askIn(t, e.ns, network, "API.Example.com", dns.TypeA)
		a := answerA(m)
		if m.Rcode != dns.RcodeSuccess || !netip.MustParsePrefix("127.77.0.0/16").Contains(a) {
			t.Fatalf("%s: rcode %s, answer %v; want an address in 127.77.0.0/16", network, dns.RcodeToString[m.Rcode], m.Answer)
		}
		if addr.IsValid() && a != addr {
			t.Fatalf("the address changed between queries: %v then %v", addr, a)
		}
		addr = a
	}
	for _, name := range []string{"unlisted.example.org", hostTenant, hostManifest, "localhost", "wild.example.com", "*" + wildSuffix} {
		if m := askIn(t, e.ns, "udp", name, dns.TypeA); m.Rcode != dns.RcodeNameError || len(m.Answer) != 0 {
			t.Errorf("%s: rcode %s, answer %v; want NXDOMAIN", name, dns.RcodeToString[m.Rcode], m.Answer)
		}
	}
	c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(e.echo.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "raw bytes through the gate\n")
	c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "raw bytes through the gate\n" {
		t.Fatalf("echo through the gate: %q %v", got, err)
	}
	eventually(t, 3*time.Second, "allow and end audited", func() bool {
		n := 0
		for _, d := range e.f.readAudit(t) {
			if d.Plugin == "gamma" && d.Host == hostBoth && (d.Decision == "allow" || d.Decision == "end") {
				n++
			}
		}
		return n == 2
	})
	if c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), "443")); err == nil {
		c.Close()
		t.Error("the gate listens on a port the lists do not allow for the name")
	}
}

// relayTo speaks the gate's relay protocol on the socket directly, as a tool could
// (the socket is bound into its sandbox), claiming the client connected to ap.
func relayTo(t *testing.T, sock string, ap netip.AddrPort, payload string) (string, error) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	a4 := ap.Addr().As4()
	hdr := append([]byte(relayMagic), a4[:]...)
	hdr = binary.BigEndian.AppendUint16(hdr, ap.Port())
	c.Write(append(hdr, payload...))
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(c)
	return string(got), err
}

// A tool that speaks to the proxy socket as a gate would gets nothing a CONNECT
// could not give it: an address the resolver never gave this sandbox, an
// address of another endpoint, or a port the lists do not allow for the name are
// refused and audited; only a name it was given, on an allowed port, is reached.
func TestGateRelayClaimsAreCheckedByTheNode(t *testing.T) {
	e := newGateEnv(t)
	echo := e.echo.Port()
	other := echoServer(t) // a service on the same host the lists do not allow
	addr := answerA(askIn(t, e.ns, "udp", hostBoth, dns.TypeA))
	// Control: the claim the real gate makes works.
	if got, _ := relayTo(t, e.sock, netip.AddrPortFrom(addr, echo), "hello\n"); got != "hello\n" {
		t.Fatalf("a genuine relay of an allowed name: %q", got)
	}
	for _, claim := range []netip.AddrPort{
		netip.AddrPortFrom(netip.MustParseAddr("127.77.0.200"), echo), // never handed out
		netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), echo),    // loopback itself
		netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), echo),     // a private address
		netip.AddrPortFrom(addr, other.Port()),                        // a port the lists do not allow, served
	} {
		if got, _ := relayTo(t, e.sock, claim, "hello\n"); got != "" {
			t.Errorf("claim %v reached something: %q", claim, got)
		}
	}
	// Another endpoint's table is not this one's: plugin alpha's socket knows no
	// name the gamma gate was given.
	if got, _ := relayTo(t, e.f.ep.Socket, netip.AddrPortFrom(addr, echo), "hello\n"); got != "" {
		t.Errorf("alpha's socket relayed gamma's name: %q", got)
	}
	eventually(t, 3*time.Second, "the refused claims audited", func() bool {
		seen := map[string]bool{}
		for _, d := range e.f.readAudit(t) {
			if d.Plugin == "gamma" && d.Decision == "deny" {
				seen[d.Host+":"+strconv.Itoa(d.Port)] = true
			}
		}
		return seen["127.77.0.200:"+strconv.Itoa(int(echo))] && seen["127.0.0.1:"+strconv.Itoa(int(echo))] &&
			seen["10.0.0.1:"+strconv.Itoa(int(echo))] && seen[hostBoth+":"+strconv.Itoa(int(other.Port()))]
	})
}

// A tool flooding its gate with unique names under an allowed suffix: every one
// is answered by the node itself (never looked up), at most MaxTransparentNames
// get an address, and a second control connection a tool opens itself shares the
// same cap.
func TestGateDNSFloodStaysLocalAndIsCapped(t *testing.T) {
	e := newGateEnv(t)
	if m := askIn(t, e.ns, "udp", hostBoth, dns.TypeA); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("%s: %s", hostBoth, dns.RcodeToString[m.Rcode])
	}
	answered, refused := 0, 0
	for i := range MaxTransparentNames + 20 {
		m := askIn(t, e.ns, "udp", fmt.Sprintf("c2VjcmV0%04d%s", i, wildSuffix), dns.TypeA)
		switch m.Rcode {
		case dns.RcodeSuccess:
			answered++
		case dns.RcodeRefused:
			refused++
		default:
			t.Fatalf("rcode %s", dns.RcodeToString[m.Rcode])
		}
	}
	if answered != MaxTransparentNames-1 || refused != 21 {
		t.Errorf("answered %d, refused %d; want %d (one name taken) and 21", answered, refused, MaxTransparentNames-1)
	}
	// A rogue gate on the same socket gets no fresh allowance.
	nsPath2, _ := newNetns(t)
	g2 := &Gate{Socket: e.sock, Resolver: netip.MustParseAddr("127.0.0.53"),
		Listen:       func(addr string) (net.Listener, error) { return ListenInNetns(nsPath2, addr) },
		ListenPacket: func(addr string) (net.PacketConn, error) { return listenPacketInNetns(nsPath2, addr) },
	}
	if err := g2.Start(); err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if m := askIn(t, nsPath2, "udp", "fresh-name"+wildSuffix, dns.TypeA); m.Rcode != dns.RcodeRefused {
		t.Errorf("a second gate got a new name past the cap: %s", dns.RcodeToString[m.Rcode])
	}
	if n := e.wildUp.Load(); n != 0 {
		t.Errorf("%d names were resolved upstream; want none", n)
	}
	// Many queries at once: the gate keeps a bounded queue; the node stays responsive.
	c, err := dialIn(t, e.ns, "udp", "127.0.0.53:53")
	if err != nil {
		t.Fatal(err)
	}
	q := new(dns.Msg)
	q.SetQuestion("flood"+wildSuffix+".", dns.TypeA)
	b, _ := q.Pack()
	for range 5000 {
		c.Write(b)
	}
	c.Close()
	eventually(t, 3*time.Second, "the resolver answering again after a flood", func() bool {
		return askIn(t, e.ns, "tcp", hostBoth, dns.TypeA).Rcode == dns.RcodeSuccess
	})
}

// A name taken off the tenant list stops resolving through the gate and its
// relayed connection is cut.
func TestGateNameTakenOffTheTenantListIsCut(t *testing.T) {
	e := newGateEnv(t)
	addr := answerA(askIn(t, e.ns, "udp", hostBoth, dns.TypeA))
	c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(e.echo.Port()))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5)
	io.WriteString(c, "ping\n")
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("echo before the change: %v", err)
	}
	writeTenant(t, e.f.tenant, strings.ReplaceAll(testTenant, hostBoth+"\n", ""))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(buf)
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the relayed connection was not cut (read: %v)", err)
	}
	if m := askIn(t, e.ns, "udp", hostBoth, dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("%s after removal: %s, want NXDOMAIN", hostBoth, dns.RcodeToString[m.Rcode])
	}
}
