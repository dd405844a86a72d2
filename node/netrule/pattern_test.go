package netrule

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParsePatternAcceptsAndCanonicalises(t *testing.T) {
	for in, want := range map[string]Pattern{
		"api.example.com":                {Host: "api.example.com"},
		"  api.example.com  ":            {Host: "api.example.com"},
		"API.EXAMPLE.COM":                {Host: "api.example.com"},
		"api.example.com.":               {Host: "api.example.com"},
		".example.com":                   {Host: ".example.com", Suffix: true},
		".example.com.":                  {Host: ".example.com", Suffix: true},
		".cdn.example.co.uk":             {Host: ".cdn.example.co.uk", Suffix: true},
		"example.co.uk":                  {Host: "example.co.uk"},
		"bücher.example":                 {Host: "xn--bcher-kva.example"},
		".BÜCHER.example":                {Host: ".xn--bcher-kva.example", Suffix: true},
		"api.example.com:1":              {Host: "api.example.com", Ports: []int{1}},
		"api.example.com:65535":          {Host: "api.example.com", Ports: []int{65535}},
		"8.8.8.8":                        {Host: "8.8.8.8"},
		"8.8.8.8:53":                     {Host: "8.8.8.8", Ports: []int{53}},
		"134744072":                      {Host: "8.8.8.8"}, // inet_aton spelling of a public address
		"2606:4700::1111":                {Host: "2606:4700::1111"},
		"[2606:4700::1111]":              {Host: "2606:4700::1111"},
		"[2606:4700::1111]:443":          {Host: "2606:4700::1111", Ports: []int{443}},
		"[::ffff:8.8.8.8]":               {Host: "8.8.8.8"},
		"xn--bcher-kva.example":          {Host: "xn--bcher-kva.example"},
		"a-b.example.com":                {Host: "a-b.example.com"},
		"1.example":                      {Host: "1.example"},
		"github.io.example.com":          {Host: "github.io.example.com"},
		"user.github.io":                 {Host: "user.github.io"}, // a private-registry suffix's child
		"s3.amazonaws.com.cn.x":          {Host: "s3.amazonaws.com.cn.x"},
		strings.Repeat("a", 63) + ".com": {Host: strings.Repeat("a", 63) + ".com"},
	} {
		got, err := ParsePattern(in)
		if err != nil {
			t.Errorf("ParsePattern(%q): %v", in, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParsePattern(%q) = %#v, want %#v", in, got, want)
		}
	}
}

func TestParsePatternRejects(t *testing.T) {
	for in, want := range map[string]error{
		"*":                 ErrWildcard,
		"*.com":             ErrWildcard,
		"*.example.com":     ErrWildcard,
		"api.*.com":         ErrWildcard,
		"*:443":             ErrWildcard,
		".com":              ErrPublicSuffix,
		".co.uk":            ErrPublicSuffix,
		"co.uk":             ErrPublicSuffix,
		".github.io":        ErrPublicSuffix, // a private-registry public suffix
		"com":               ErrPublicSuffix,
		"COM.":              ErrPublicSuffix,
		"intranet":          ErrPublicSuffix,
		"localhost":         ErrLocal,
		"LOCALHOST.":        ErrLocal,
		"localhost:8080":    ErrLocal,
		"foo.localhost":     ErrLocal,
		"127.0.0.1":         ErrLocal,
		"127.0.0.1:80":      ErrLocal,
		"10.0.0.1":          ErrLocal,
		"172.16.5.4":        ErrLocal,
		"192.168.0.1":       ErrLocal,
		"169.254.169.254":   ErrLocal,
		"100.64.0.1":        ErrLocal,
		"0.0.0.0":           ErrLocal,
		"224.0.0.1":         ErrLocal,
		"2130706433":        ErrLocal,
		"0x7f.1":            ErrLocal,
		"0177.0.0.1":        ErrLocal,
		"127.1":             ErrLocal,
		"0x7f000001":        ErrLocal,
		"0":                 ErrLocal,
		"[::1]":             ErrLocal,
		"::1":               ErrLocal,
		"[::ffff:10.0.0.1]": ErrLocal,
		"[fe80::1]:22":      ErrLocal,
		"fd00::1":           ErrLocal,
		"[64:ff9b::a00:1]":  ErrLocal,
		"2002:a00:1::":      ErrLocal,
		"[2001:0:1::1]":     ErrLocal,
		"169.254.169.254.":  ErrLocal,
	} {
		p, err := ParsePattern(in)
		if err == nil {
			t.Errorf("ParsePattern(%q) = %#v, want %v", in, p, want)
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("ParsePattern(%q): %v, want %v", in, err, want)
		}
	}
	for _, in := range []string{
		"", "   ", ".", "..com", ".", "..", ".example..com", "example..com",
		"example.com:0", "example.com:65536", "example.com:08", "example.com:+80", "example.com:-1",
		"example.com:", "[2606:4700::1]:", "example.com:http", "example.com:80:81", "[2606:4700::1", "[2606:4700::1]x",
		"under_score.example.com", "exa mple.com", "example.com/path", "http://example.com",
		".127.0.0.1", ".8.8.8.8", "fe80::1%eth0", strings.Repeat("a", 64) + ".com",
		strings.Repeat("a.", 127) + "com", "-bad.example.com", "\xff.example.com",
	} {
		if p, err := ParsePattern(in); err == nil {
			t.Errorf("ParsePattern(%q) = %#v, want an error", in, p)
		}
	}
}

func TestParsePatternErrorsQuoteTheInput(t *testing.T) {
	for _, in := range []string{".com", "localhost", "10.1.2.3", ".8.8.8.8", "example.com:0"} {
		_, err := ParsePattern(in)
		if err == nil || !strings.Contains(err.Error(), in[strings.LastIndex(in, ":")+1:]) {
			t.Errorf("ParsePattern(%q): %v does not name the input", in, err)
		}
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "80": 80, "443": 443, "65535": 65535} {
		if got, err := ParsePort(in); err != nil || got != want {
			t.Errorf("ParsePort(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0", "65536", "08", "00", "+1", "-1", " 1", "1 ", "0x50", "1e3", "99999999999999999999"} {
		if got, err := ParsePort(in); err == nil {
			t.Errorf("ParsePort(%q) = %d, want an error", in, got)
		}
	}
}

func TestMatchSuffixExactAndPorts(t *testing.T) {
	multi := Pattern{Host: ".example.com", Suffix: true, Ports: []int{80, 443}}
	exact := Pattern{Host: "example.com"}
	v6 := Pattern{Host: "2606:4700::1111", Ports: []int{443}}
	for _, c := range []struct {
		p    Pattern
		host string
		port int
		want bool
	}{
		{multi, "a.example.com", 80, true},
		{multi, "a.example.com", 443, true},
		{multi, "a.example.com", 8080, false},
		{multi, "example.com", 443, false},
		{multi, ".example.com", 443, false},
		{multi, "aexample.com", 443, false},
		{multi, "a.example.com.evil.net", 443, false},
		{exact, "example.com", 1, true},
		{exact, "example.com", 65535, true},
		{exact, "a.example.com", 443, false},
		{exact, "example.co", 443, false},
		{v6, "2606:4700::1111", 443, true},
		{v6, "2606:4700::1111", 80, false},
	} {
		if got := c.p.Match(c.host, c.port); got != c.want {
			t.Errorf("%v.Match(%q, %d) = %v, want %v", c.p, c.host, c.port, got, c.want)
		}
	}
}

func TestBroadSuffixes(t *testing.T) {
	for in, want := range map[string]bool{
		".example.com":       true,
		".example.co.uk":     true,
		".user.github.io":    true,
		".api.example.com":   false,
		".a.b.example.co.uk": false,
		"example.com":        false,
		"api.example.com":    false,
	} {
		p, err := ParsePattern(in)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", in, err)
		}
		if p.Broad() != want {
			t.Errorf("%q.Broad() = %v, want %v", in, p.Broad(), want)
		}
	}
}

func TestStringRoundTrips(t *testing.T) {
	for _, in := range []string{"api.example.com", ".example.com", "example.com:443", "[2606:4700::1]:443", "2606:4700::1", "8.8.8.8:53"} {
		p, err := ParsePattern(in)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParsePattern(p.String())
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Errorf("%q → %q → %#v, %v; want %#v", in, p.String(), q, err, p)
		}
	}
}

// Each forbidden IPv4 range: its first and last address are forbidden, and the
// public address just outside it (when there is one) is allowed.
func TestForbiddenIPv4RangeEdges(t *testing.T) {
	for _, c := range []struct{ first, last, before, after string }{
		{"10.0.0.0", "10.255.255.255", "9.255.255.255", "11.0.0.0"},
		{"100.64.0.0", "100.127.255.255", "100.63.255.255", "100.128.0.0"},
		{"127.0.0.0", "127.255.255.255", "126.255.255.255", "128.0.0.0"},
		{"169.254.0.0", "169.254.255.255", "169.253.255.255", "169.255.0.0"},
		{"172.16.0.0", "172.31.255.255", "172.15.255.255", "172.32.0.0"},
		{"192.168.0.0", "192.168.255.255", "192.167.255.255", "192.169.0.0"},
		{"198.18.0.0", "198.19.255.255", "198.17.255.255", "198.20.0.0"},
		{"224.0.0.0", "255.255.255.255", "223.255.255.255", ""},
		{"0.0.0.0", "0.255.255.255", "", "1.0.0.0"},
	} {
		for _, s := range []string{c.first, c.last} {
			if !Forbidden(netip.MustParseAddr(s)) {
				t.Errorf("Forbidden(%s) = false", s)
			}
		}
		for _, s := range []string{c.before, c.after} {
			if s != "" && Forbidden(netip.MustParseAddr(s)) {
				t.Errorf("Forbidden(%s) = true; it is public", s)
			}
		}
	}
}

func TestForbiddenIgnoresZonesAndRefusesEmbeddedForms(t *testing.T) {
	for _, s := range []string{"fe80::1%eth0", "::ffff:1.1.1.1", "::1.1.1.1", "64:ff9b::101:101", "2002:101:101::1", "2001::1"} {
		if !Forbidden(netip.MustParseAddr(s)) {
			t.Errorf("Forbidden(%s) = false", s)
		}
	}
	if err := ForbiddenError(netip.MustParseAddr("10.0.0.1")); err == nil || !strings.Contains(err.Error(), "10.0.0.1") {
		t.Errorf("ForbiddenError: %v", err)
	}
	if err := ForbiddenError(netip.MustParseAddr("1.1.1.1")); err != nil {
		t.Errorf("ForbiddenError(1.1.1.1): %v", err)
	}
}

func TestParseIPLiteralSpellings(t *testing.T) {
	for in, want := range map[string]string{
		"1.1.1.1": "1.1.1.1", "16843009": "1.1.1.1", "0x1.0x1.0x1.0x1": "1.1.1.1", "01.01.01.01": "1.1.1.1",
		"1.65793": "1.1.1.1", "1.1.257": "1.1.1.1", "0X01010101": "1.1.1.1", "[2606:4700::1]": "2606:4700::1",
		"127.000.000.001": "127.0.0.1", "4294967295": "255.255.255.255",
	} {
		a, err := ParseIPLiteral(in)
		if err != nil || a.String() != want {
			t.Errorf("ParseIPLiteral(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	for _, in := range []string{"4294967296", "1.256.1.1", "1.1.65536", "1.16777216", "09", "0x1g", "1.2.3.", "a.b.c.d", "-1", "+1", "1_000"} {
		if a, err := ParseIPLiteral(in); err == nil && in != "1.2.3." {
			t.Errorf("ParseIPLiteral(%q) = %s, want an error", in, a)
		}
	}
}

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{"Example.COM.": "example.com", "bücher.example": "xn--bcher-kva.example", "XN--BCHER-KVA.example": "xn--bcher-kva.example"} {
		if got, err := CanonicalHost(in); err != nil || got != want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "a..b", "a_b.com", strings.Repeat("a", 254), "\xff"} {
		if got, err := CanonicalHost(in); err == nil {
			t.Errorf("CanonicalHost(%q) = %q, want an error", in, got)
		}
	}
}

// FuzzParsePattern: ParsePattern never panics; an accepted pattern renders to text
// that parses back to the same pattern, is canonical, and never names a local host
// or a forbidden address.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"api.example.com", ".example.com", "example.com:443", "[2606:4700::1]:443", "2606:4700::1",
		"8.8.8.8", "134744072", "0x7f.1", "bücher.example", "*", ".co.uk", "localhost.", "[::ffff:8.8.8.8]:80", "a.b:08"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			if p.Host != "" || p.Ports != nil {
				t.Fatalf("error %v with a non-zero pattern %#v", err, p)
			}
			return
		}
		q, err := ParsePattern(p.String())
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("%q → %#v renders %q → %#v, %v", s, p, p.String(), q, err)
		}
		host := strings.TrimPrefix(p.Host, ".")
		if host == "" || strings.ContainsAny(host, "*[] ") || host != strings.ToLower(host) || strings.HasSuffix(host, ".") {
			t.Fatalf("%q: host %q is not canonical", s, p.Host)
		}
		if p.Suffix != strings.HasPrefix(p.Host, ".") {
			t.Fatalf("%q: Suffix %v with host %q", s, p.Suffix, p.Host)
		}
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			t.Fatalf("%q accepted as %q", s, p.Host)
		}
		if a, err := ParseIPLiteral(host); err == nil {
			if Forbidden(a) {
				t.Fatalf("%q accepted forbidden address %s", s, a)
			}
			if p.Suffix {
				t.Fatalf("%q: an address as a suffix", s)
			}
		}
		for _, n := range p.Ports {
			if n < 1 || n > 65535 {
				t.Fatalf("%q: port %d", s, n)
			}
		}
	})
}
