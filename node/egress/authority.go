package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"oz0.ai/node/node/netrule"
)

// Target is where a client asked to go, in the one form lists are matched in.
type Target struct {
	// Host is the canonical host name (lower case, no trailing dot, IDNA ASCII) or,
	// for an address literal, the address in standard form.
	Host string
	// IP is set when the client named an address, in whatever spelling
	// ("2130706433", "0x7f.1", "[::1]" …); the zero Addr for a name.
	IP   netip.Addr
	Port int
}

// String renders host:port ("[v6]:port" for IPv6).
func (t Target) String() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// maxAuthority bounds what is parsed: a 253-byte name, brackets and a port.
const maxAuthority = 300

// ParseAuthority parses a request's target: "host:port", "[v6]:port", or a bare host
// when defaultPort > 0. Host names are canonicalised and address literals in any
// resolver spelling are recognised as the address. User info, paths, zones,
// percent-encoding, whitespace and control characters are refused.
func ParseAuthority(s string, defaultPort int) (Target, error) {
	if s == "" {
		return Target{}, errors.New("empty host")
	}
	if len(s) > maxAuthority {
		return Target{}, fmt.Errorf("host %.40q…: longer than %d bytes", s, maxAuthority)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("@/\\?#%,;\"'<>`{}|^", r) {
			return Target{}, fmt.Errorf("host %q: character %q is not allowed", s, r)
		}
	}
	var host, port string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Target{}, fmt.Errorf("host %q: unclosed [", s)
		}
		host, port = s[1:end], s[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return Target{}, fmt.Errorf("host %q: [ ] must hold an IPv6 address", s)
		}
		switch {
		case port == "":
		case strings.HasPrefix(port, ":"):
			port = port[1:]
			if port == "" {
				return Target{}, fmt.Errorf("host %q: empty port", s)
			}
		default:
			return Target{}, fmt.Errorf("host %q: unexpected text after ]", s)
		}
	case strings.Count(s, ":") > 1:
		return Target{}, fmt.Errorf("host %q: an IPv6 address must be written in [ ]", s)
	default:
		host = s
		if i := strings.IndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
			if port == "" {
				return Target{}, fmt.Errorf("host %q: empty port", s)
			}
		}
	}
	t := Target{Port: defaultPort}
	if port != "" {
		n, err := netrule.ParsePort(port)
		if err != nil {
			return Target{}, fmt.Errorf("host %q: %w", s, err)
		}
		t.Port = n
	}
	if t.Port == 0 {
		return Target{}, fmt.Errorf("host %q: a port is required", s)
	}
	if host == "" {
		return Target{}, fmt.Errorf("host %q: empty host name", s)
	}
	if a, err := netrule.ParseIPLiteral(host); err == nil {
		t.IP, t.Host = a, a.String()
		return t, nil
	}
	canon, err := netrule.CanonicalHost(host)
	if err != nil {
		return Target{}, err
	}
	// A name that canonicalises into an address literal ("0x7f.1." is handled above,
	// but IDNA can fold full-width digits into ASCII ones) is treated as the address.
	if a, err := netrule.ParseIPLiteral(canon); err == nil {
		t.IP, t.Host = a, a.String()
		return t, nil
	}
	t.Host = canon
	return t, nil
}
