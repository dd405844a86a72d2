package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

// dialIn connects from inside the namespace at nsPath, as a sandboxed tool would.
func dialIn(t testing.TB, nsPath, network, addr string) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	err := inNetns(nsPath, func() (err error) {
		c, err = net.DialTimeout(network, addr, 5*time.Second)
		return err
	}, func() {
		if c != nil {
			c.Close()
		}
	})
	return c, err
}

// askIn sends one query for name from inside the namespace over network (udp or
// tcp) to the sandbox's resolver.
func askIn(t testing.TB, nsPath, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c, err := dialIn(t, nsPath, network, "127.0.0.53:53")
	if err != nil {
		t.Fatalf("dial the resolver over %s: %v", network, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	dc := &dns.Conn{Conn: c}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	if err := dc.WriteMsg(q); err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	m, err := dc.ReadMsg()
	if err != nil {
		t.Fatalf("answer for %s: %v", name, err)
	}
	return m
}

func answerA(m *dns.Msg) netip.Addr {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			ad, _ := netip.AddrFromSlice(a.A)
			return ad.Unmap()
		}
	}
	return netip.Addr{}
}

type transparentEnv struct {
	f      *fixture
	ns     string
	echo   netip.AddrPort
	wildUp atomic.Int64 // names under the wild suffix the proxy resolved upstream
}

const wildSuffix = ".wild.example.com"

// newTransparentEnv starts a proxy (loopback opened as --egress-allow-cidr would)
// serving plugin gamma transparently in a fresh network namespace: gamma may reach
// hostBoth on the echo server's port (the manifest names the port) and any name
// under wildSuffix on it (the tenant list names the port).
func newTransparentEnv(t *testing.T) *transparentEnv {
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
	ln, err := ListenInNetns(nsPath, "127.0.0.1:3128")
	if err != nil {
		t.Fatal(err)
	}
	rules := PluginRules{Plugin: "gamma", Egress: []manifest.EgressEntry{
		{Host: hostBoth, Ports: []int{int(e.echo.Port())}}, {Host: hostManifest}, {Host: wildSuffix},
	}}
	if _, err := e.f.p.AddPlugin(rules, Listen{Listener: ln, Netns: nsPath, Resolver: netip.MustParseAddr("127.0.0.53")}); err != nil {
		t.Fatal(err)
	}
	return e
}

// A client with no proxy support reaches an allowed host by name: the node's
// resolver answers with an address of the namespace's own loopback, and a plain
// TCP connection there is tunnelled to the host, with the proxy's decision and
// audit. Names the lists do not both allow do not exist.
func TestTransparentResolvesOnlyAllowedNamesAndTunnelsRawTCP(t *testing.T) {
	e := newTransparentEnv(t)
	port := strconv.Itoa(int(e.echo.Port()))
	var addr netip.Addr
	for _, network := range []string{"udp", "tcp"} {
		m := askIn(t, e.ns, network, "API.Example.com", dns.TypeA)
		a := answerA(m)
		if m.Rcode != dns.RcodeSuccess || !a.IsValid() || !netip.MustParsePrefix("127.77.0.0/16").Contains(a) {
			t.Fatalf("%s: %s: rcode %s, answer %v; want an address in 127.77.0.0/16", network, hostBoth, dns.RcodeToString[m.Rcode], m.Answer)
		}
		if addr.IsValid() && a != addr {
			t.Fatalf("the address changed between queries: %v then %v", addr, a)
		}
		addr = a
	}
	if m := askIn(t, e.ns, "udp", hostBoth, dns.TypeAAAA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Errorf("AAAA of an allowed name: %s %v; want no records", dns.RcodeToString[m.Rcode], m.Answer)
	}
	for _, name := range []string{"unlisted.example.org", hostTenant, hostManifest, "localhost", "127.0.0.1", "wild.example.com",
		// Names that are no host name: wildcards, escaped bytes, spaces.
		"*" + wildSuffix, `a\000b` + wildSuffix, `a\032b` + wildSuffix, `a\.b` + wildSuffix, "2130706433"} {
		if m := askIn(t, e.ns, "udp", name, dns.TypeA); m.Rcode != dns.RcodeNameError || len(m.Answer) != 0 {
			t.Errorf("%s: rcode %s, answer %v; want NXDOMAIN", name, dns.RcodeToString[m.Rcode], m.Answer)
		}
	}

	c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "raw bytes, no CONNECT\n")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "raw bytes, no CONNECT\n" {
		t.Fatalf("echo through the transparent listener: %q %v", got, err)
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

	// Another port of the same address is not served: the manifest names one.
	if c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), "443")); err == nil {
		c.Close()
		t.Error("a port the lists do not allow for the name is listened on")
	}
}

// A name taken off the tenant list stops resolving, its open connections are cut,
// and a new connection to the address it had is refused.
func TestTransparentNameTakenOffTheTenantListIsCut(t *testing.T) {
	e := newTransparentEnv(t)
	addr := answerA(askIn(t, e.ns, "udp", hostBoth, dns.TypeA))
	target := net.JoinHostPort(addr.String(), strconv.Itoa(int(e.echo.Port())))
	c, err := dialIn(t, e.ns, "tcp", target)
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
	start := time.Now()
	_, err = c.Read(buf)
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the open connection was not cut within 5 s of its name leaving the tenant list (read: %v)", err)
	}
	t.Logf("open connection cut %s after the list was written (%v)", time.Since(start).Round(time.Millisecond), err)
	if m := askIn(t, e.ns, "udp", hostBoth, dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("%s after removal: %s %v, want NXDOMAIN", hostBoth, dns.RcodeToString[m.Rcode], m.Answer)
	}
	c2, err := dialIn(t, e.ns, "tcp", target)
	if err == nil {
		c2.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c2, "ping\n")
		if n, _ := io.ReadFull(c2, buf); n > 0 {
			t.Errorf("a new connection to the removed name's address was tunnelled")
		}
		c2.Close()
	}
	eventually(t, 3*time.Second, "the cut and the refusal audited", func() bool {
		var revoked, denied bool
		for _, d := range e.f.readAudit(t) {
			revoked = revoked || (d.Decision == "end" && d.Host == hostBoth && strings.HasPrefix(d.Rule, "revoked"))
			denied = denied || (d.Decision == "deny" && d.Host == hostBoth && d.Rule == "tenant")
		}
		return revoked && denied
	})
}

// Data carried out in names: many unique names under an allowed suffix are each
// answered by the node itself, none is looked up anywhere (the proxy resolves a
// name only to connect), and past MaxTransparentNames the sandbox gets REFUSED
// and the operator a finding.
func TestTransparentDNSExfiltrationStaysLocalAndIsCapped(t *testing.T) {
	e := newTransparentEnv(t)
	answered, refused := 0, 0
	for i := range MaxTransparentNames + 20 {
		name := fmt.Sprintf("c2VjcmV0LWNodW5r%04d%s", i, wildSuffix)
		network := "udp"
		if i%2 == 1 {
			network = "tcp"
		}
		m := askIn(t, e.ns, network, name, dns.TypeA)
		switch m.Rcode {
		case dns.RcodeSuccess:
			answered++
		case dns.RcodeRefused:
			refused++
		default:
			t.Fatalf("%s: %s", name, dns.RcodeToString[m.Rcode])
		}
	}
	if answered != MaxTransparentNames || refused != 20 {
		t.Errorf("answered %d, refused %d; want %d and 20", answered, refused, MaxTransparentNames)
	}
	if n := e.wildUp.Load(); n != 0 {
		t.Errorf("%d of the names were resolved by the node's upstream resolver; want none", n)
	}
	var found bool
	for _, f := range e.f.p.Findings() {
		found = found || (f.Code == api.CodeEgressNameCap && f.Subject == "gamma")
	}
	if !found {
		t.Errorf("no %s finding: %+v", api.CodeEgressNameCap, e.f.p.Findings())
	}
	// Names already handed out keep their address.
	if m := askIn(t, e.ns, "udp", fmt.Sprintf("c2VjcmV0LWNodW5r%04d%s", 3, wildSuffix), dns.TypeA); m.Rcode != dns.RcodeSuccess {
		t.Errorf("a name allocated before the cap: %s", dns.RcodeToString[m.Rcode])
	}
	// The finding goes with the plugin.
	e.f.p.RemovePlugin("gamma")
	if fs := e.f.p.Findings(); len(fs) != 0 {
		t.Errorf("findings after the plugin's removal: %+v", fs)
	}
}

// The endpoint closing (the sandbox ended) closes its resolver and name listeners.
func TestTransparentEndsWithItsEndpoint(t *testing.T) {
	e := newTransparentEnv(t)
	addr := answerA(askIn(t, e.ns, "udp", hostBoth, dns.TypeA))
	e.f.p.RemovePlugin("gamma")
	if c, err := dialIn(t, e.ns, "tcp", "127.0.0.53:53"); err == nil {
		c.Close()
		t.Error("the resolver still listens after the plugin was removed")
	}
	if c, err := dialIn(t, e.ns, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(int(e.echo.Port())))); err == nil {
		c.Close()
		t.Error("a name listener still listens after the plugin was removed")
	}
}
