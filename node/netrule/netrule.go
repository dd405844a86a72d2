// Package netrule holds the host patterns that egress lists are written in and the
// address ranges no plugin may reach. Manifest validation, the tenant list and the
// egress proxy all match through it, so a pattern means the same thing everywhere.
package netrule

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// Pattern is one egress entry: an exact host ("api.example.com") or a leading-dot
// suffix (".example.com", which matches example.com's subdomains, not example.com
// itself), optionally limited to ports. An empty Ports allows any port.
type Pattern struct {
	Host   string // canonical; with the leading dot for a suffix
	Suffix bool
	Ports  []int
}

// String renders the pattern in list syntax (host[:port]); several ports are joined
// with commas.
func (p Pattern) String() string {
	if len(p.Ports) == 0 {
		return p.Host
	}
	ps := make([]string, len(p.Ports))
	for i, n := range p.Ports {
		ps[i] = strconv.Itoa(n)
	}
	host := p.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]" // an IPv6 literal: "2606:4700::1:443" would be another address
	}
	return host + ":" + strings.Join(ps, ",")
}

// Match reports whether a canonical host and port fall under the pattern.
func (p Pattern) Match(host string, port int) bool {
	if len(p.Ports) > 0 && !containsInt(p.Ports, port) {
		return false
	}
	if p.Suffix {
		return strings.HasSuffix(host, p.Host) && len(host) > len(p.Host)
	}
	return host == p.Host
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Broad reports whether a suffix pattern covers a whole registrable domain
// (".example.com" or wider): lint warns about those.
func (p Pattern) Broad() bool {
	if !p.Suffix {
		return false
	}
	base := strings.TrimPrefix(p.Host, ".")
	etld1, err := publicsuffix.EffectiveTLDPlusOne(base)
	return err != nil || etld1 == base
}

var (
	// ErrWildcard: "*" and "*.x" patterns are never accepted; a leading dot is the
	// only suffix form, so every allowed name is written out.
	ErrWildcard = errors.New("wildcards are not allowed; write an exact host or a leading-dot suffix such as .example.com")
	// ErrPublicSuffix: a pattern that would allow a whole public suffix (".com").
	ErrPublicSuffix = errors.New("a bare public suffix would allow every site under it")
	// ErrLocal: loopback, private, link-local and similar literals or names.
	ErrLocal = errors.New("local and private addresses cannot be allowed by a list")
)

// ParsePattern parses "host", ".suffix", "host:port" or "[v6]:port". It rejects
// wildcards, bare public suffixes, localhost and IP literals in forbidden ranges.
func ParsePattern(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Pattern{}, errors.New("empty host pattern")
	}
	host, portStr, err := splitHostPortOpt(s)
	if err != nil {
		return Pattern{}, err
	}
	p := Pattern{}
	if portStr != "" {
		n, err := ParsePort(portStr)
		if err != nil {
			return Pattern{}, err
		}
		p.Ports = []int{n}
	}
	if strings.Contains(host, "*") {
		return Pattern{}, ErrWildcard
	}
	if strings.HasPrefix(host, ".") {
		p.Suffix = true
		host = host[1:]
		if host == "" || strings.HasPrefix(host, ".") {
			return Pattern{}, fmt.Errorf("%q: a suffix needs a domain after the leading dot", s)
		}
	}
	if a, err := ParseIPLiteral(host); err == nil {
		if p.Suffix {
			return Pattern{}, fmt.Errorf("%q: an IP address cannot be a suffix", s)
		}
		if Forbidden(a) {
			return Pattern{}, fmt.Errorf("%q: %w", s, ErrLocal)
		}
		p.Host = a.String()
		return p, nil
	}
	canon, err := CanonicalHost(host)
	if err != nil {
		return Pattern{}, fmt.Errorf("%q: %w", s, err)
	}
	if canon == "localhost" || strings.HasSuffix(canon, ".localhost") {
		return Pattern{}, fmt.Errorf("%q: %w", s, ErrLocal)
	}
	if !strings.Contains(canon, ".") {
		return Pattern{}, fmt.Errorf("%q: %w", s, ErrPublicSuffix)
	}
	if suffix, icann := publicsuffix.PublicSuffix(canon); suffix == canon && (icann || strings.Contains(canon, ".")) {
		return Pattern{}, fmt.Errorf("%q: %w", s, ErrPublicSuffix)
	}
	if p.Suffix {
		p.Host = "." + canon
	} else {
		p.Host = canon
	}
	return p, nil
}

// splitHostPortOpt splits an optional ":port", accepting "[v6]" and "[v6]:port".
func splitHostPortOpt(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("%q: unclosed [", s)
		}
		host, rest := s[1:end], s[end+1:]
		switch {
		case rest == "":
			return host, "", nil
		case rest == ":":
			return "", "", fmt.Errorf("%q: empty port after ':'", s)
		case strings.HasPrefix(rest, ":"):
			return host, rest[1:], nil
		default:
			return "", "", fmt.Errorf("%q: unexpected text after ]", s)
		}
	}
	if strings.Count(s, ":") > 1 {
		return s, "", nil // bare IPv6
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		if i == len(s)-1 {
			return "", "", fmt.Errorf("%q: empty port after ':'", s)
		}
		return s[:i], s[i+1:], nil
	}
	return s, "", nil
}

// ParsePort parses a decimal TCP port in 1–65535.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || s[0] == '+' || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("port %q: must be a number from 1 to 65535", s)
	}
	return n, nil
}

var hostProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.ValidateLabels(true),
	idna.StrictDomainName(true),
	idna.Transitional(false),
)

// CanonicalHost lowercases, drops one trailing dot and converts IDNs to their ASCII
// form, so that two spellings of a name compare equal. It rejects names that are
// not valid DNS host names (underscores, empty labels, over-long names).
func CanonicalHost(h string) (string, error) {
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return "", errors.New("empty host name")
	}
	if len(h) > 253 {
		return "", errors.New("host name longer than 253 characters")
	}
	if !utf8.ValidString(h) {
		return "", fmt.Errorf("host name %q: not valid UTF-8", h)
	}
	a, err := hostProfile.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("host name %q: %w", h, err)
	}
	a = strings.ToLower(a)
	// The canonical form must be a fixed point, or two spellings could match
	// differently depending on which side was canonicalised how often.
	if again, err := hostProfile.ToASCII(a); err != nil || again != a {
		return "", fmt.Errorf("host name %q: no stable ASCII form", h)
	}
	for _, label := range strings.Split(a, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("host name %q: bad label length", h)
		}
	}
	return a, nil
}

// ParseIPLiteral recognises an IP address in any spelling a resolver would accept:
// dotted quads, IPv6, and the legacy inet_aton forms ("2130706433", "0x7f.1",
// "0177.0.0.1", "127.1") that turn into loopback when resolved. Names that are not
// address literals return an error.
func ParseIPLiteral(h string) (netip.Addr, error) {
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, errors.New("zoned address")
		}
		return a.Unmap(), nil
	}
	return parseInetAton(h)
}

// parseInetAton implements the BSD inet_aton grammar: 1–4 parts, each decimal,
// octal (leading 0) or hex (0x), the last part filling the remaining bytes.
func parseInetAton(s string) (netip.Addr, error) {
	bad := errors.New("not an IPv4 literal")
	if s == "" {
		return netip.Addr{}, bad
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, bad
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" {
			return netip.Addr{}, bad
		}
		base := 10
		digits := p
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 64)
		if err != nil || v > 0xffffffff {
			return netip.Addr{}, bad
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, bad
		}
		n |= vals[i] << (8 * (3 - i))
	}
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, bad
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), nil
}

// forbidden lists ranges a plugin may never reach through the proxy, whatever a list
// says. IPv6 forms that embed an IPv4 address are unpacked by Forbidden and checked
// again as IPv4.
var forbidden = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
	"192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"255.255.255.255/32",
	"::/128", "::1/128", "::ffff:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48",
	"100::/64", "2001::/23", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48",
	"3fff::/20", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
)

// globalUnicast is the only IPv6 space the internet is routed in (2000::/3). Anything
// outside it is special or unassigned (and holds the IPv4-embedding forms listed
// above), so it is refused as a whole rather than range by range.
var globalUnicast = netip.MustParsePrefix("2000::/3")

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Forbidden reports whether an address is loopback, private, link-local (the cloud
// metadata address included), CGNAT, ULA, multicast, unspecified, broadcast,
// documentation/reserved (AS112, AMT, benchmarking), IPv6 outside global unicast,
// or an IPv6 form embedding an IPv4 address (mapped, compatible, NAT64, 6to4,
// Teredo). Invalid addresses are forbidden.
func Forbidden(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return true // never dial mapped forms, whatever they embed
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return true
	}
	for _, p := range forbidden {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ForbiddenError explains why an address is out of reach; nil when it is allowed.
func ForbiddenError(a netip.Addr) error {
	if Forbidden(a) {
		return fmt.Errorf("address %s is in a range no plugin may reach (loopback, private, link-local, CGNAT, ULA, multicast, reserved or an IPv4-embedding IPv6 form)", a)
	}
	return nil
}
