package egress

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/netrule"
)

func mustTenant(t *testing.T, s string) *tenantList {
	t.Helper()
	ps, lines, err := netrule.ParseTenantList(strings.NewReader(s), "tenant/egress")
	if err != nil {
		t.Fatal(err)
	}
	return &tenantList{path: "tenant/egress", patterns: ps, lines: lines}
}

func TestDecideTable(t *testing.T) {
	r, err := compile(PluginRules{Plugin: "p",
		Egress: []manifest.EgressEntry{{Host: "api.example.com", Ports: []int{443}}, {Host: ".cdn.example.net"}, {Host: "8.8.8.8"}},
		Servers: map[string][]manifest.EgressEntry{
			"narrow": {{Host: "api.example.com"}},
			"wide":   nil,
		}})
	if err != nil {
		t.Fatal(err)
	}
	tl := mustTenant(t, "api.example.com\n.example.net:443\n8.8.8.8\n")
	never := func(netip.Addr) bool { return false }
	cases := []struct {
		server, authority string
		allow             bool
		rule              string
	}{
		{"", "api.example.com:443", true, "manifest api.example.com:443 + tenant api.example.com (line 1)"},
		{"", "API.Example.COM.:443", true, ""},
		{"", "api.example.com:80", false, "manifest"},
		{"", "a.cdn.example.net:443", true, ""},
		{"", "a.cdn.example.net:80", false, "tenant"},
		{"", "cdn.example.net:443", false, "manifest"},
		{"", "8.8.8.8:443", true, ""},
		{"", "134744072:443", true, ""}, // 8.8.8.8 spelled as one number
		{"", "127.0.0.1:443", false, "address-guard"},
		{"", "0x7f.1:443", false, "address-guard"},
		{"narrow", "api.example.com:443", true, "manifest api.example.com:443 server api.example.com + tenant api.example.com (line 1)"},
		{"narrow", "a.cdn.example.net:443", false, "server"},
		{"wide", "a.cdn.example.net:443", true, ""},
		{"unknown", "a.cdn.example.net:443", true, ""},
		{"", "evil.example.org:443", false, "manifest+tenant"},
	}
	for _, c := range cases {
		tg, err := ParseAuthority(c.authority, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.authority, err)
		}
		v := decide(r, c.server, tl, tg, never)
		if v.allow != c.allow || (c.rule != "" && v.rule != c.rule) {
			t.Errorf("%s via %q: allow=%v rule=%q, want %v %q", c.authority, c.server, v.allow, v.rule, c.allow, c.rule)
		}
		if !v.allow && !strings.Contains(v.why, "plugin p") {
			t.Errorf("%s: explanation does not name the plugin: %q", c.authority, v.why)
		}
	}
	broken := &tenantList{path: "tenant/egress", err: errLine}
	if v := decide(r, "", broken, Target{Host: "api.example.com", Port: 443}, never); v.allow || v.rule != "tenant-list-unreadable" {
		t.Errorf("broken list: %+v", v)
	}
	missing := &tenantList{path: "tenant/egress", missing: true}
	if v := decide(r, "", missing, Target{Host: "api.example.com", Port: 443}, never); v.allow || !strings.Contains(v.why, "does not exist") {
		t.Errorf("missing list: %+v", v)
	}
}

var errLine = netrule.ErrWildcard

func TestParseAuthority(t *testing.T) {
	ok := map[string]string{
		"api.example.com:443":   "api.example.com:443",
		"API.EXAMPLE.COM.:443":  "api.example.com:443",
		"bücher.example:443":    "xn--bcher-kva.example:443",
		"[2606:4700::1]:443":    "[2606:4700::1]:443",
		"2130706433:80":         "127.0.0.1:80",
		"0x7f.1:80":             "127.0.0.1:80",
		"0177.0.0.1:80":         "127.0.0.1:80",
		"127.1:80":              "127.0.0.1:80",
		"[::ffff:127.0.0.1]:80": "127.0.0.1:80",
		"１２７.０.０.１:80":          "127.0.0.1:80", // full-width digits fold to an address
	}
	for in, want := range ok {
		tg, err := ParseAuthority(in, 0)
		if err != nil || tg.String() != want {
			t.Errorf("ParseAuthority(%q) = %v, %v; want %s", in, tg, err, want)
		}
	}
	if tg, err := ParseAuthority("api.example.com", 443); err != nil || tg.Port != 443 {
		t.Errorf("default port: %v %v", tg, err)
	}
	for _, in := range []string{"", "api.example.com", "api.example.com:", ":443", "a@b.example.com:443", "a.example.com:443/x",
		"a.example.com:0", "a.example.com:65536", "a.example.com:+1", "a.example.com:08", "::1:443", "[::1", "[127.0.0.1]:80",
		"[fe80::1%25eth0]:80", "a_b.example.com:80", "a b:80", "a\x00b:80", "a.example.com:443:443", "[::1]x:80"} {
		if tg, err := ParseAuthority(in, 0); err == nil {
			t.Errorf("ParseAuthority(%q) = %v, want an error", in, tg)
		}
	}
}

// FuzzParseAuthority: the request-target parser never panics, and what it accepts
// is canonical: rendering and parsing again gives the same target, names are
// canonical host names, and anything that spells an address is the address.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "[::1]:80", "2130706433:80", "0x7f.1:80", "bücher.example:443",
		"[::ffff:127.0.0.1]:443", "a.b:1", "１２７.０.０.１:80", "xn--bcher-kva.example:443", "0:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseAuthority(s, 0)
		if err != nil {
			return
		}
		if tg.Port < 1 || tg.Port > 65535 {
			t.Fatalf("%q: port %d", s, tg.Port)
		}
		again, err := ParseAuthority(tg.String(), 0)
		if err != nil || again != tg {
			t.Fatalf("%q → %v → %v (%v)", s, tg, again, err)
		}
		if tg.IP.IsValid() {
			if tg.Host != tg.IP.String() || tg.IP.Is4In6() || tg.IP.Zone() != "" {
				t.Fatalf("%q: address target %+v", s, tg)
			}
			return
		}
		if c, err := netrule.CanonicalHost(tg.Host); err != nil || c != tg.Host {
			t.Fatalf("%q: host %q not canonical (%q, %v)", s, tg.Host, c, err)
		}
		if _, err := netrule.ParseIPLiteral(tg.Host); err == nil {
			t.Fatalf("%q: name %q is an address literal", s, tg.Host)
		}
	})
}

// FuzzParseSOCKSRequest: no panic, and accepted targets are canonical.
func FuzzParseSOCKSRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 3, 15, 'a', 'p', 'i', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187})
	f.Add([]byte{5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1, 0, 80})
	f.Fuzz(func(t *testing.T, b []byte) {
		tg, code, err := ParseSOCKSRequest(bytes.NewReader(b))
		if err != nil {
			if code == socksOK {
				t.Fatalf("error %v with reply OK", err)
			}
			return
		}
		if again, err := ParseAuthority(tg.String(), 0); err != nil || again != tg {
			t.Fatalf("%v → %v (%v)", tg, again, err)
		}
	})
}

func TestRingNewestFirst(t *testing.T) {
	r := ring{max: 3}
	if got := r.newest(5); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := 1; i <= 7; i++ {
		r.add(api.EgressDecision{Port: i})
		got := r.newest(10)
		want := []int{}
		for j := i; j > 0 && len(want) < 3; j-- {
			want = append(want, j)
		}
		if len(got) != len(want) {
			t.Fatalf("after %d: %v", i, got)
		}
		for k := range want {
			if got[k].Port != want[k] {
				t.Fatalf("after %d: got %v, want ports %v", i, got, want)
			}
		}
	}
	if got := r.newest(1); len(got) != 1 || got[0].Port != 7 {
		t.Fatalf("newest(1) = %v", got)
	}
}
