package netrule

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"code.dny.dev/ssrf"
)

// The SSRF vectors the egress proxy must refuse, one per range or spelling.
var forbiddenVectors = []string{
	"127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3", "10.1.2.3", "172.16.0.1",
	"172.31.255.255", "192.168.1.1", "169.254.169.254", "169.254.0.1", "100.64.0.1",
	"100.127.255.255", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
	"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.1", "203.0.113.1", "192.88.99.1",
	"192.31.196.1", "192.52.193.1", "192.175.48.1",
	"::", "::1", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "::127.0.0.1", "::8.8.8.8",
	"64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::1", "2002:7f00:1::", "2002:808:808::",
	"2001:0:4136:e378:8000:63bf:80ff:fffe", "2001:db8::1", "fc00::1", "fd12:3456::1",
	"fe80::1", "fec0::1", "ff02::1", "100::1", "1::1", "4000::1", "3fff::1", "2620:4f:8000::1",
}

var allowedVectors = []string{"8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "2a00:1450:4001::200e"}

func TestForbiddenVectors(t *testing.T) {
	for _, s := range forbiddenVectors {
		if !Forbidden(netip.MustParseAddr(s)) {
			t.Errorf("Forbidden(%s) = false, want true", s)
		}
	}
	for _, s := range allowedVectors {
		if Forbidden(netip.MustParseAddr(s)) {
			t.Errorf("Forbidden(%s) = true, want false", s)
		}
	}
	if !Forbidden(netip.Addr{}) {
		t.Error("the zero Addr must be forbidden")
	}
}

// The proxy checks dialled addresses with both Forbidden and code.dny.dev/ssrf; they
// must agree, so neither silently carries the whole load.
func TestForbiddenAgreesWithSSRF(t *testing.T) {
	g := ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())
	check := func(a netip.Addr) {
		t.Helper()
		if !a.IsValid() {
			return // past the end of the address space
		}
		ours := Forbidden(a)
		theirs := g.SafeAddr(a) != nil
		if ours != theirs {
			t.Errorf("%s: netrule.Forbidden=%v, ssrf denies=%v", a, ours, theirs)
		}
	}
	for _, s := range append(append([]string{}, forbiddenVectors...), allowedVectors...) {
		check(netip.MustParseAddr(s))
	}
	// Both ends and the neighbours of every listed range.
	for _, p := range append(append([]netip.Prefix{}, ssrf.IPv4DeniedPrefixes...), ssrf.IPv6DeniedPrefixes...) {
		lo := p.Masked().Addr()
		check(lo)
		check(lo.Prev())
		hi := lastAddr(p)
		check(hi)
		check(hi.Next())
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		var b4 [4]byte
		var b16 [16]byte
		for j := range b4 {
			b4[j] = byte(r.Uint32())
		}
		for j := range b16 {
			b16[j] = byte(r.Uint32())
		}
		if i%2 == 0 {
			b16[0] = 0x20 | b16[0]&0x1f // mostly global unicast, where the lists matter
		}
		check(netip.AddrFrom4(b4))
		check(netip.AddrFrom16(b16))
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := bits; i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestParseIPLiteralOddSpellings(t *testing.T) {
	cases := map[string]string{
		"2130706433":          "127.0.0.1",
		"0x7f000001":          "127.0.0.1",
		"0x7f.1":              "127.0.0.1",
		"0177.0.0.1":          "127.0.0.1",
		"127.1":               "127.0.0.1",
		"127.0.1":             "127.0.0.1",
		"0":                   "0.0.0.0",
		"017700000001":        "127.0.0.1",
		"0xA9.0xFE.0xA9.0xFE": "169.254.169.254",
		"169.254.43518":       "169.254.169.254",
		"[::1]":               "::1",
		"::ffff:7f00:1":       "127.0.0.1",
		"127.0.0.1.":          "127.0.0.1",
	}
	for in, want := range cases {
		a, err := ParseIPLiteral(in)
		if err != nil {
			t.Errorf("ParseIPLiteral(%q): %v", in, err)
			continue
		}
		if a.String() != want {
			t.Errorf("ParseIPLiteral(%q) = %s, want %s", in, a, want)
		}
		if !Forbidden(a) {
			t.Errorf("%q (%s) must be forbidden", in, a)
		}
	}
	for _, in := range []string{"example.com", "1.2.3.4.5", "256.1.1.1", "08.0.0.1", "0x", "1..2", "fe80::1%eth0", ""} {
		if a, err := ParseIPLiteral(in); err == nil && in != "0x" {
			t.Errorf("ParseIPLiteral(%q) = %s, want an error", in, a)
		}
	}
}

func TestParsePatternRefusesLocal(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "2130706433", "[::1]", "localhost", "a.localhost", "169.254.169.254:80", "*", "*.com", ".com", "com", ".co.uk"} {
		if p, err := ParsePattern(s); err == nil {
			t.Errorf("ParsePattern(%q) = %v, want an error", s, p)
		}
	}
	for s, want := range map[string]string{
		"API.Example.COM.":   "api.example.com",
		".Example.com":       ".example.com",
		"bücher.example":     "xn--bcher-kva.example",
		"example.com:8443":   "example.com:8443",
		"[2606:4700::1]:443": "[2606:4700::1]:443",
	} {
		p, err := ParsePattern(s)
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", s, err)
			continue
		}
		if p.String() != want {
			t.Errorf("ParsePattern(%q) = %q, want %q", s, p.String(), want)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	exact, _ := ParsePattern("api.example.com")
	suffix, _ := ParsePattern(".example.com")
	port, _ := ParsePattern("api.example.com:443")
	cases := []struct {
		p    Pattern
		host string
		port int
		want bool
	}{
		{exact, "api.example.com", 443, true},
		{exact, "api.example.com", 80, true},
		{exact, "xapi.example.com", 443, false},
		{exact, "api.example.com.evil.net", 443, false},
		{suffix, "a.example.com", 443, true},
		{suffix, "a.b.example.com", 443, true},
		{suffix, "example.com", 443, false},
		{suffix, "badexample.com", 443, false},
		{port, "api.example.com", 443, true},
		{port, "api.example.com", 8443, false},
	}
	for _, c := range cases {
		if got := c.p.Match(c.host, c.port); got != c.want {
			t.Errorf("%v.Match(%q, %d) = %v, want %v", c.p, c.host, c.port, got, c.want)
		}
	}
}

// FuzzPatternMatch: a parsed pattern is canonical (parsing its own rendering gives
// it back), matches its own host, and never matches a host that does not end in it.
func FuzzPatternMatch(f *testing.F) {
	for _, s := range []string{"api.example.com", ".example.com", "example.com:443", "[2606:4700::1]:443", "8.8.8.8", "bücher.example", "xn--bcher-kva.example", "a.b.c.d.e"} {
		f.Add(s, "api.example.com", 443)
	}
	f.Fuzz(func(t *testing.T, pat, host string, port int) {
		p, err := ParsePattern(pat)
		if err != nil {
			return
		}
		again, err := ParsePattern(p.String())
		if err != nil || again.String() != p.String() {
			t.Fatalf("pattern %q renders as %q which parses as %q (%v)", pat, p.String(), again.String(), err)
		}
		if p.Suffix != strings.HasPrefix(p.Host, ".") {
			t.Fatalf("pattern %q: Suffix=%v but Host=%q", pat, p.Suffix, p.Host)
		}
		anyPort := port
		if len(p.Ports) > 0 {
			anyPort = p.Ports[0]
		}
		if !p.Suffix && !p.Match(p.Host, anyPort) {
			t.Fatalf("%q does not match its own host", pat)
		}
		if p.Suffix && !p.Match("x"+p.Host, anyPort) {
			t.Fatalf("%q does not match a subdomain", pat)
		}
		if p.Match(host, port) {
			if !strings.HasSuffix(host, strings.TrimPrefix(p.Host, ".")) {
				t.Fatalf("%q matched %q, which does not end in it", pat, host)
			}
			if p.Suffix && host == strings.TrimPrefix(p.Host, ".") {
				t.Fatalf("suffix %q matched the bare domain", pat)
			}
			if a, err := ParseIPLiteral(host); err == nil && Forbidden(a) {
				t.Fatalf("%q matched forbidden address %s", pat, a)
			}
		}
	})
}
