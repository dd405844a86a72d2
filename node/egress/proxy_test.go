package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

func hello(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Seen-Proxy-Authorization", r.Header.Get("Proxy-Authorization"))
	w.Header().Set("X-Seen-Custom-Hop", r.Header.Get("X-Custom-Hop"))
	fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
}

// An allowed host is reached over CONNECT+TLS and plain absolute-form HTTP, through
// the unix socket and the TCP endpoint alike.
func TestAllowedHostCONNECTTLSAndPlainHTTP(t *testing.T) {
	f := newFixture(t, true, nil)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	for _, unix := range []bool{true, false} {
		c := f.client(unix, tlsSrv)
		resp, err := c.Get(hostURL(tlsSrv, hostBoth) + "/tls")
		if err != nil {
			t.Fatalf("unix=%v: HTTPS via CONNECT: %v", unix, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "/tls") {
			t.Fatalf("unix=%v: HTTPS via CONNECT: %s %q", unix, resp.Status, b)
		}
		req, _ := http.NewRequest("GET", hostURL(plain, hostBoth)+"/plain", nil)
		req.Header.Set("Connection", "X-Custom-Hop")
		req.Header.Set("X-Custom-Hop", "must not be forwarded")
		// The credential (here checked on TCP, ignored on the socket) is a hop
		// header: it never reaches the server.
		req.Header.Set("Proxy-Authorization", strings.TrimSpace(strings.TrimPrefix(testAuthHeader, "Proxy-Authorization:")))
		resp, err = c.Do(req)
		if err != nil {
			t.Fatalf("unix=%v: plain HTTP: %v", unix, err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "hello from "+hostBoth+":"+port(plain)+"/plain" {
			t.Fatalf("unix=%v: plain HTTP: %s %q", unix, resp.Status, b)
		}
		if v := resp.Header.Get("X-Seen-Proxy-Authorization") + resp.Header.Get("X-Seen-Custom-Hop"); v != "" {
			t.Fatalf("hop-by-hop headers reached the server: %q", v)
		}
	}
	st, _ := f.p.Stats("alpha")
	if st.Allowed != 4 || st.Denied != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// A host in only one of the two lists is refused, and the 403 says which list
// refused which host and how to change it.
func TestHostInOneListRefusedWithExplanation(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	cases := []struct {
		host      string
		want      []string
		notWanted string
	}{
		{hostManifest, []string{"Refused by the tenant's egress list " + f.tenant, "no line allows " + hostManifest, "adds a line \"" + hostManifest + "\""}, "manifest:"},
		{hostTenant, []string{"Refused by the plugin's manifest", hostTenant + ":" + port(plain) + " is not in its egress list", "reinstalls"}, "tenant's egress list"},
		{"nowhere.example.com", []string{"Refused by the plugin's manifest", "Refused by the tenant's egress list"}, ""},
	}
	for _, tc := range cases {
		for _, mode := range []string{"connect", "forward"} {
			c := f.dialUnix(t)
			var req string
			if mode == "connect" {
				req = fmt.Sprintf("CONNECT %s:%s HTTP/1.1\r\nHost: x\r\n\r\n", tc.host, port(plain))
			} else {
				req = fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", tc.host, port(plain))
			}
			resp, body := raw(t, c, req)
			c.Close()
			if resp.StatusCode != 403 {
				t.Fatalf("%s %s: %s, want 403", mode, tc.host, resp.Status)
			}
			if !strings.Contains(body, "plugin alpha may not reach "+tc.host) {
				t.Errorf("%s %s: body does not name plugin and host: %q", mode, tc.host, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("%s %s: body lacks %q: %q", mode, tc.host, w, body)
				}
			}
			if tc.notWanted != "" && strings.Contains(body, tc.notWanted) {
				t.Errorf("%s %s: body blames %q: %q", mode, tc.host, tc.notWanted, body)
			}
		}
	}
	st, _ := f.p.Stats("alpha")
	if st.Denied != 6 || st.Allowed != 0 || len(st.LastDenials) != 6 || st.LastDenials[0].Host != "nowhere.example.com" {
		t.Fatalf("stats: %+v", st)
	}
}

// Each SSRF vector, sent as a raw request line (curl would normalise it), is
// refused — as an address literal or as a name resolving there — with no operator
// range open.
func TestSSRFVectorsRefusedRaw(t *testing.T) {
	f := newFixture(t, false, nil)
	literals := []string{
		"127.0.0.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.1", "127.0.0.1.",
		"0", "0.0.0.0", "10.0.0.1", "172.16.0.1", "192.168.0.1", "169.254.169.254", "0xA9FEA9FE",
		"100.64.0.1", "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.1",
		"[::1]", "[::]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
		"[64:ff9b::a9fe:a9fe]", "[2002:7f00:1::]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
		"[fd00::1]", "[fe80::1]", "[ff02::1]",
	}
	names := []string{hostPrivate, hostMeta, hostMixed, hostBoth /* 127.0.0.1 without --egress-allow-cidr */}
	var targets []string
	targets = append(targets, literals...)
	targets = append(targets, names...)
	for _, h := range targets {
		for _, line := range []string{
			"CONNECT " + h + ":80 HTTP/1.1\r\nHost: " + h + ":80\r\n\r\n",
			"GET http://" + h + ":80/latest/meta-data/ HTTP/1.1\r\nHost: " + h + "\r\n\r\n",
			"GET http://" + h + "/ HTTP/1.0\r\n\r\n",
		} {
			c := f.dialUnix(t)
			resp, body := raw(t, c, line)
			c.Close()
			if resp.StatusCode != 403 {
				t.Errorf("%q: %s, want 403", firstLine(line), resp.Status)
				continue
			}
			isName := !strings.ContainsAny(h[:1], "0123456789[")
			if isName && !strings.Contains(body, "address guard") {
				t.Errorf("%q: refused, but not by the address guard: %q", firstLine(line), body)
			}
		}
	}
	// URL-parser confusion: whatever the parser makes of these, nothing is dialled.
	for _, line := range []string{
		"GET http://%31%32%37.0.0.1/ HTTP/1.1\r\n\r\n",
		"GET http://api.example.com@127.0.0.1/ HTTP/1.1\r\n\r\n",
		"GET http://127.0.0.1#@api.example.com/ HTTP/1.1\r\n\r\n",
		"GET http://127.0.0.1\\@api.example.com/ HTTP/1.1\r\n\r\n",
		"GET http://api.example.com:80@169.254.169.254/ HTTP/1.1\r\n\r\n",
		"GET http://[::ffff:a9fe:a9fe]/ HTTP/1.1\r\n\r\n",
		"GET http://169.254.169.254%2f.api.example.com/ HTTP/1.1\r\n\r\n",
		"CONNECT 127.0.0.1%2f:80 HTTP/1.1\r\n\r\n",
		"CONNECT api.example.com:80@127.0.0.1:80 HTTP/1.1\r\n\r\n",
	} {
		c := f.dialUnix(t)
		resp, body := raw(t, c, line)
		c.Close()
		if resp.StatusCode != 400 && resp.StatusCode != 403 {
			t.Errorf("%q: %s %q, want 400 or 403", firstLine(line), resp.Status, body)
		}
	}
	for _, d := range f.p.Recent(recentSize) {
		if d.Decision != "deny" {
			t.Fatalf("a vector was allowed: %+v", d)
		}
	}
}

// The dial-time hook refuses what the guard refuses, whatever the resolver said:
// it checks the socket address actually connected to.
func TestDialControlChecksRealAddress(t *testing.T) {
	g := newGuard(nil)
	ctl := g.control("x.example.com")
	for _, a := range []string{"127.0.0.1:80", "[::1]:443", "[::ffff:10.0.0.1]:80", "169.254.169.254:80", "[64:ff9b::a00:1]:80"} {
		if err := ctl("tcp", a, nil); err == nil {
			t.Errorf("control(%s) allowed", a)
		}
	}
	if err := ctl("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("control(8.8.8.8:443): %v", err)
	}
	g = newGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	if err := g.control("x")("tcp", "127.0.0.2:80", nil); err != nil {
		t.Errorf("operator range not honoured: %v", err)
	}
	if err := g.control("x")("tcp", "10.0.0.1:80", nil); err == nil {
		t.Error("operator range opened more than it says")
	}
}

// The resolver is asked once per connection and the address it gave is the one
// dialled: a name that answers differently the second time (rebinding) gains
// nothing, because nothing asks it a second time.
func TestResolvedOnceNoRebinding(t *testing.T) {
	var calls atomic.Int32
	echo := echoServer(t)
	f := newFixture(t, true, func(c *Config) {
		c.Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if calls.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
		}
	})
	c := f.dialUnix(t)
	defer c.Close()
	br := connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, echo.Port()))
	io.WriteString(c, "ping")
	b := make([]byte, 4)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
		t.Fatalf("echo: %q %v", b, err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("resolver called %d times for one connection", n)
	}
	d := f.p.Recent(1)[0]
	if d.Decision != "allow" || d.Addr != "127.0.0.1" {
		t.Fatalf("decision: %+v", d)
	}
}

// A redirect is returned to the client, never followed by the proxy.
func TestRedirectNotFollowed(t *testing.T) {
	f := newFixture(t, true, nil)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/go" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		if r.URL.Path == "/local" {
			http.Redirect(w, r, "/secret", http.StatusTemporaryRedirect)
			return
		}
		w.Write([]byte("secret"))
	}))
	defer srv.Close()
	c := f.dialUnix(t)
	defer c.Close()
	resp, _ := raw(t, c, fmt.Sprintf("GET http://%s:%s/go HTTP/1.1\r\nHost: %s\r\n\r\n", hostBoth, port(srv), hostBoth))
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://169.254.169.254/latest/meta-data/" {
		t.Fatalf("got %s Location=%q", resp.Status, resp.Header.Get("Location"))
	}
	// Same connection, kept alive: a same-host redirect is not followed either.
	resp, _ = raw(t, c, fmt.Sprintf("GET http://%s:%s/local HTTP/1.1\r\nHost: %s\r\n\r\n", hostBoth, port(srv), hostBoth))
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("got %s", resp.Status)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2 (no redirect followed)", n)
	}
}

// Taking a host off the tenant list closes an open tunnel to it mid-transfer
// (within 100 ms of the write) and refuses new connections; a tunnel to a host
// still listed stays open.
func TestTenantRemovalCutsTunnelMidTransfer(t *testing.T) {
	f := newFixture(t, true, nil)
	stream := streamServer(t)
	echo := echoServer(t)
	c := f.dialUnix(t)
	defer c.Close()
	br := connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, stream.Port()))
	other := f.dialUnix(t)
	defer other.Close()
	obr := connectTo(t, other, fmt.Sprintf("%s:%d", hostOther, echo.Port()))

	// The transfer is running.
	got := make(chan error, 1)
	var n atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			k, err := br.Read(buf)
			n.Add(int64(k))
			if err != nil {
				got <- err
				return
			}
		}
	}()
	eventually(t, 5*time.Second, "transfer started", func() bool { return n.Load() > 1<<20 })

	writeTenant(t, f.tenant, strings.ReplaceAll(testTenant, hostBoth+"\n", ""))
	written := time.Now()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("tunnel to a removed host still open after 5 s")
	}
	took := time.Since(written)
	t.Logf("tunnel closed %v after the list was written (%d bytes moved)", took, n.Load())
	if took > 100*time.Millisecond {
		t.Errorf("tunnel closed after %v, want within 100 ms", took)
	}

	// New connections to it are refused.
	c2 := f.dialUnix(t)
	resp, body := raw(t, c2, fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\n\r\n", hostBoth, stream.Port()))
	c2.Close()
	if resp.StatusCode != 403 || !strings.Contains(body, "tenant's egress list") {
		t.Fatalf("after removal: %s %q", resp.Status, body)
	}
	// The other tunnel still works.
	other.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(other, "still here")
	b := make([]byte, 10)
	if _, err := io.ReadFull(obr, b); err != nil || string(b) != "still here" {
		t.Fatalf("unrelated tunnel broken: %q %v", b, err)
	}
	other.Close()

	var revoked bool
	for _, d := range f.readAudit(t) {
		if d.Decision == "end" && d.Host == hostBoth && strings.HasPrefix(d.Rule, "revoked") && d.Bytes > 1<<20 {
			revoked = true
		}
	}
	if !revoked {
		t.Error("audit has no end record saying the tunnel was revoked")
	}
}

// A plugin's rules are live too: UpdatePlugin dropping a host closes its tunnels.
func TestUpdatePluginCutsTunnel(t *testing.T) {
	f := newFixture(t, true, nil)
	echo := echoServer(t)
	c := f.dialUnix(t)
	defer c.Close()
	br := connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, echo.Port()))
	if err := f.p.UpdatePlugin(PluginRules{Plugin: "alpha", Egress: []manifest.EgressEntry{{Host: hostOther}}}); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("tunnel still open after its host left the manifest")
	}
}

// A list that cannot be parsed denies everything, raises a finding naming the
// line, and recovers when fixed — all without a restart.
func TestBrokenTenantListDeniesAllAndRecovers(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	get := func() (*http.Response, string) {
		c := f.dialUnix(t)
		defer c.Close()
		return raw(t, c, fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", hostBoth, port(plain)))
	}
	if r, _ := get(); r.StatusCode != 200 {
		t.Fatalf("before: %s", r.Status)
	}
	if len(f.p.Findings()) != 0 {
		t.Fatalf("findings before: %+v", f.p.Findings())
	}
	writeTenant(t, f.tenant, hostBoth+"\n*.example.com\n")
	eventually(t, time.Second, "broken list applied", func() bool { return len(f.p.Findings()) == 1 })
	r, body := get()
	if r.StatusCode != 403 || !strings.Contains(body, "line 2") || !strings.Contains(body, "refuses every connection") {
		t.Fatalf("with a broken list: %s %q", r.Status, body)
	}
	fd := f.p.Findings()[0]
	if fd.Code != api.CodeTenantListUnreadable || fd.Severity != api.SevCritical || !strings.Contains(fd.Message, "line 2") || fd.Subject != f.tenant {
		t.Fatalf("finding: %+v", fd)
	}
	if st := f.p.Status(5); st.TenantOK {
		t.Fatalf("status says the list is fine: %+v", st)
	}
	// An unreadable file is the same.
	if os.Getuid() != 0 {
		writeTenant(t, f.tenant, testTenant)
		eventually(t, time.Second, "fixed", func() bool { return len(f.p.Findings()) == 0 })
		os.Chmod(f.tenant, 0)
		eventually(t, 2*time.Second, "unreadable list applied", func() bool { return len(f.p.Findings()) == 1 })
	}
	writeTenant(t, f.tenant, testTenant)
	eventually(t, 2*time.Second, "recovered", func() bool { return len(f.p.Findings()) == 0 })
	if r, _ := get(); r.StatusCode != 200 {
		t.Fatalf("after the fix: %s", r.Status)
	}
}

// Editors that write in place (truncate + write) and ones that rename are both seen.
func TestTenantListInPlaceWrite(t *testing.T) {
	f := newFixture(t, true, nil)
	if err := os.WriteFile(f.tenant, []byte(hostOther+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, time.Second, "in-place write applied", func() bool {
		st := f.p.Status(0)
		return len(st.Patterns) == 1 && st.Patterns[0] == hostOther
	})
	t.Logf("applied in %v", took)
}

// socksConnect performs a SOCKS5 no-auth CONNECT; it returns the reply code.
func socksConnect(t testing.TB, c net.Conn, atyp byte, addr []byte, port uint16) (byte, *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, atyp}
	if atyp == socksAtypDomain {
		req = append(req, byte(len(addr)))
	}
	req = append(req, addr...)
	req = binary.BigEndian.AppendUint16(req, port)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var m [2]byte
	if _, err := io.ReadFull(br, m[:]); err != nil || m != [2]byte{5, 0} {
		t.Fatalf("socks method reply %v %v", m, err)
	}
	var r [10]byte
	if _, err := io.ReadFull(br, r[:]); err != nil {
		t.Fatalf("socks reply: %v", err)
	}
	c.SetDeadline(time.Time{})
	return r[1], br
}

// SOCKS5 works for an allowed name and is refused the same way as HTTP otherwise:
// other lists' hosts, IPv4, IPv6 and odd spellings of loopback.
func TestSOCKS5AllowedAndDeniedLikeHTTP(t *testing.T) {
	f := newFixture(t, true, nil)
	echo := echoServer(t)
	c := f.dialUnix(t)
	defer c.Close()
	code, br := socksConnect(t, c, socksAtypDomain, []byte(hostBoth), echo.Port())
	if code != socksOK {
		t.Fatalf("allowed host: reply %d", code)
	}
	io.WriteString(c, "over socks")
	b := make([]byte, 10)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "over socks" {
		t.Fatalf("echo: %q %v", b, err)
	}
	denied := []struct {
		atyp byte
		addr []byte
	}{
		{socksAtypDomain, []byte(hostManifest)},
		{socksAtypDomain, []byte(hostTenant)},
		{socksAtypDomain, []byte("2130706433")},
		{socksAtypDomain, []byte("0x7f.1")},
		{socksAtypDomain, []byte("::1")},
		{socksAtypIPv4, []byte{127, 0, 0, 1}},
		{socksAtypIPv4, []byte{169, 254, 169, 254}},
		{socksAtypIPv6, netip.MustParseAddr("::ffff:127.0.0.1").AsSlice()},
		{socksAtypIPv6, netip.MustParseAddr("::1").AsSlice()},
	}
	for _, d := range denied {
		c := f.dialUnix(t)
		code, _ := socksConnect(t, c, d.atyp, d.addr, echo.Port())
		c.Close()
		if code != socksNotAllowed {
			t.Errorf("socks %d %v: reply %d, want %d (not allowed by ruleset)", d.atyp, d.addr, code, socksNotAllowed)
		}
	}
	// Without the operator's loopback range the allowed name is refused by the guard.
	g := newFixture(t, false, nil)
	c2 := g.dialUnix(t)
	defer c2.Close()
	if code, _ := socksConnect(t, c2, socksAtypDomain, []byte(hostBoth), echo.Port()); code != socksNotAllowed {
		t.Fatalf("guarded name: reply %d", code)
	}
	// A client offering only username/password is told no method is acceptable.
	c3 := f.dialUnix(t)
	defer c3.Close()
	c3.SetDeadline(time.Now().Add(5 * time.Second))
	c3.Write([]byte{5, 1, 2})
	var m [2]byte
	if _, err := io.ReadFull(c3, m[:]); err != nil || m != [2]byte{5, 0xff} {
		t.Fatalf("auth-only greeting: %v %v", m, err)
	}
}

// Every decision is in the audit log as a JSON line with the documented fields.
func TestAuditLines(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	c := f.dialUnix(t)
	raw(t, c, fmt.Sprintf("GET http://%s:%s/a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", hostBoth, port(plain)))
	c.Close()
	c = f.dialUnix(t)
	raw(t, c, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
	c.Close()
	recs := f.readAudit(t)
	if len(recs) != 3 {
		t.Fatalf("audit has %d records, want allow+end+deny: %+v", len(recs), recs)
	}
	// The first connection's "end" is written when its tunnel winds down, which
	// may come after the second connection's "deny": match records by decision.
	by := map[string]api.EgressDecision{}
	for _, r := range recs {
		by[r.Decision] = r
	}
	a, e, d := by["allow"], by["end"], by["deny"]
	if a.Decision != "allow" || a.Plugin != "alpha" || a.Host != hostBoth || a.Port != plain.Listener.Addr().(*net.TCPAddr).Port ||
		a.Addr != "127.0.0.1" || !strings.Contains(a.Rule, "manifest "+hostBoth) || !strings.Contains(a.Rule, "tenant "+hostBoth+" (line 2)") || a.Time == "" {
		t.Errorf("allow record: %+v", a)
	}
	if e.Decision != "end" || e.Bytes < int64(len("hello from")) || e.Host != hostBoth || e.Seconds <= 0 {
		t.Errorf("end record: %+v", e)
	}
	if d.Decision != "deny" || d.Host != hostTenant || d.Port != 443 || d.Rule != "manifest" {
		t.Errorf("deny record: %+v", d)
	}
	fi, err := os.Stat(f.audit)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode: %v %v", fi.Mode(), err)
	}
}

// Requests that are not proxy requests get 400.
func TestMalformedRequests400(t *testing.T) {
	f := newFixture(t, true, nil)
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: " + hostBoth + "\r\n\r\n",
		"CONNECT " + hostBoth + " HTTP/1.1\r\n\r\n",
		"CONNECT " + hostBoth + ":0 HTTP/1.1\r\n\r\n",
		"CONNECT " + hostBoth + ":99999 HTTP/1.1\r\n\r\n",
		"CONNECT user@" + hostBoth + ":443 HTTP/1.1\r\n\r\n",
		"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
		"GET ftp://" + hostBoth + "/ HTTP/1.1\r\n\r\n",
		"GET http://user:pw@" + hostBoth + "/ HTTP/1.1\r\n\r\n",
		"GET http://a_b.example.com/ HTTP/1.1\r\n\r\n",
		"NONSENSE\r\n\r\n",
		"GET http://" + hostBoth + "/ HTTP/9.9\r\n\r\n",
	} {
		c := f.dialUnix(t)
		resp, body := raw(t, c, req)
		c.Close()
		if resp.StatusCode != 400 && !(strings.Contains(req, "9.9") && resp.StatusCode == 505) {
			t.Errorf("%q: %s %q, want 400", firstLine(req), resp.Status, body)
		}
	}
}

// The plugin is known from the endpoint alone: what a client sends cannot claim
// another plugin's rules.
func TestIdentityFromEndpointOnly(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	beta, err := f.p.AddPlugin(PluginRules{Plugin: "beta", Egress: []manifest.EgressEntry{{Host: hostTenant}}},
		Listen{Socket: filepath.Join(f.dir, "run", "egress", "beta", "egress.sock")})
	if err != nil {
		t.Fatal(err)
	}
	// beta may reach hostTenant (in its manifest and the tenant list); alpha may not,
	// whatever alpha's request says about itself.
	c := f.dialUnix(t)
	resp, _ := raw(t, c, fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic YmV0YTo=\r\nX-Oz0-Plugin: beta\r\n\r\n", hostTenant, port(plain)))
	c.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("alpha reached beta's host: %s", resp.Status)
	}
	cb, err := net.Dial("unix", beta.Socket)
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = raw(t, cb, fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", hostTenant, port(plain)))
	cb.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("beta: %s", resp.Status)
	}
	sa, _ := f.p.Stats("alpha")
	sb, _ := f.p.Stats("beta")
	if sa.Denied != 1 || sa.Allowed != 0 || sb.Allowed != 1 || sb.Denied != 0 {
		t.Fatalf("stats alpha %+v beta %+v", sa, sb)
	}
	fi, err := os.Stat(filepath.Dir(beta.Socket))
	if err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("socket folder mode %v %v", fi.Mode(), err)
	}
	fi, err = os.Stat(beta.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	f.p.RemovePlugin("beta")
	if _, err := os.Stat(beta.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after RemovePlugin: %v", err)
	}
	if _, ok := f.p.Stats("beta"); ok {
		t.Fatal("stats of a removed plugin")
	}
}

// On a server's own endpoint, the server's list narrows the plugin's, and audit
// names the server.
func TestServerEndpointNarrows(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	rules := PluginRules{Plugin: "alpha", Egress: testManifest, Servers: map[string][]manifest.EgressEntry{"narrow": {{Host: hostOther}}}}
	ep, err := f.p.AddPlugin(rules, Listen{Socket: filepath.Join(f.dir, "run", "egress", "alpha-narrow", "egress.sock"), Server: "narrow"})
	if err != nil {
		t.Fatal(err)
	}
	try := func(sock, host string) int {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp, _ := raw(t, c, fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\r\nHost: x\r\n\r\n", host, port(plain)))
		return resp.StatusCode
	}
	if got := try(ep.Socket, hostOther); got != 200 {
		t.Fatalf("narrowed server, allowed host: %d", got)
	}
	if got := try(ep.Socket, hostBoth); got != 403 {
		t.Fatalf("narrowed server, host only the plugin lists: %d", got)
	}
	if got := try(f.ep.Socket, hostBoth); got != 200 {
		t.Fatalf("plugin-wide endpoint: %d", got)
	}
	r := f.p.Recent(3)
	if r[1].Server != "narrow" || r[1].Decision != "deny" || r[1].Rule != "server" || r[2].Server != "narrow" {
		t.Fatalf("recent: %+v", r)
	}
}

// Past MaxConnsPerPlugin, connections are turned away at once.
func TestConnectionCapPerPlugin(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.MaxConnsPerPlugin = 2 })
	a, b := f.dialUnix(t), f.dialUnix(t)
	defer a.Close()
	defer b.Close()
	eventually(t, 2*time.Second, "two open", func() bool { s, _ := f.p.Stats("alpha"); return s.Open == 2 })
	c := f.dialUnix(t)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("third connection was served")
	}
	if s, _ := f.p.Stats("alpha"); s.Refused != 1 {
		t.Fatalf("stats %+v", s)
	}
	a.Close()
	eventually(t, 2*time.Second, "slot freed", func() bool { s, _ := f.p.Stats("alpha"); return s.Open == 1 })
	d := f.dialUnix(t)
	defer d.Close()
	resp, _ := raw(t, d, "GET / HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 400 {
		t.Fatalf("after a slot freed: %s", resp.Status)
	}
}

// A client that sends its headers slowly is cut off at the header timeout; one
// that sends too many gets 431.
func TestSlowlorisAndHeaderLimit(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.HeaderTimeout = 200 * time.Millisecond; c.MaxHeaderBytes = 4096 })
	for _, proto := range []string{"http", "socks"} {
		c := f.dialUnix(t)
		start := time.Now()
		if proto == "http" {
			io.WriteString(c, "CONNECT "+hostBoth+":443 HTTP/1.1\r\nX-Slow: ")
		} else {
			c.Write([]byte{5, 1})
		}
		go func() {
			// Keep dribbling: a per-read timeout would never fire.
			for i := 0; i < 40; i++ {
				time.Sleep(50 * time.Millisecond)
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		all, _ := io.ReadAll(c)
		took := time.Since(start)
		c.Close()
		if took > 1500*time.Millisecond {
			t.Fatalf("%s: slow client held the connection for %v", proto, took)
		}
		if proto == "http" && !strings.Contains(string(all), "408") {
			t.Errorf("http: got %q, want a 408", all)
		}
	}
	c := f.dialUnix(t)
	defer c.Close()
	resp, _ := raw(t, c, "GET http://"+hostBoth+"/ HTTP/1.1\r\nX-Big: "+strings.Repeat("a", 8000)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %s", resp.Status)
	}
}

// Half-close passes through a tunnel: the client ends its side, the server still
// answers, then both ends close.
func TestTunnelHalfClose(t *testing.T) {
	f := newFixture(t, true, nil)
	srv := loopbackServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c) // until the client's half-close arrives
		fmt.Fprintf(c, "read %d bytes", len(b))
	})
	for _, unix := range []bool{true, false} {
		var c net.Conn
		if unix {
			c = f.dialUnix(t)
		} else {
			var err error
			c, err = net.Dial("tcp", f.ep.TCP.String())
			if err != nil {
				t.Fatal(err)
			}
		}
		br := connectTo(t, c, fmt.Sprintf("%s:%d", hostBoth, srv.Port()))
		io.WriteString(c, "12345")
		c.(interface{ CloseWrite() error }).CloseWrite()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(br)
		c.Close()
		if err != nil || string(got) != "read 5 bytes" {
			t.Fatalf("unix=%v: %q %v", unix, got, err)
		}
	}
}

// Subscribers see decisions as they happen.
func TestSubscribe(t *testing.T) {
	f := newFixture(t, true, nil)
	ch, stop := f.p.Subscribe(8)
	c := f.dialUnix(t)
	raw(t, c, "CONNECT "+hostTenant+":443 HTTP/1.1\r\n\r\n")
	c.Close()
	select {
	case d := <-ch:
		if d.Decision != "deny" || d.Host != hostTenant {
			t.Fatalf("event %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	stop()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after stop")
	}
}

// A denied request whose client is still sending its body gets the 403, not a reset.
func TestDeniedWhileClientSendsBody(t *testing.T) {
	f := newFixture(t, true, nil)
	c := f.dialUnix(t)
	defer c.Close()
	body := strings.Repeat("x", 100<<10)
	go io.WriteString(c, fmt.Sprintf("POST http://%s/upload HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", hostTenant, len(body), body))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("got %v %v, want 403", resp, err)
	}
}

func TestAddPluginRefusesALiveSocketPath(t *testing.T) {
	f := newFixture(t, true, nil)
	if _, err := f.p.AddPlugin(PluginRules{Plugin: "beta"}, Listen{Socket: f.ep.Socket}); err == nil {
		t.Fatal("a second plugin took over alpha's socket")
	}
	c := f.dialUnix(t) // alpha's endpoint still answers
	resp, _ := raw(t, c, "GET / HTTP/1.1\r\n\r\n")
	c.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("alpha's endpoint: %s", resp.Status)
	}
	if _, err := f.p.AddPlugin(PluginRules{Plugin: "beta"}, Listen{}); err == nil {
		t.Fatal("an endpoint with neither socket nor TCP")
	}
	if err := f.p.UpdatePlugin(PluginRules{Plugin: "nobody"}); err == nil {
		t.Fatal("UpdatePlugin of an unknown plugin")
	}
}

// The decision is taken on the request target; a Host header naming somewhere else
// neither changes it nor reaches the server.
func TestHostHeaderCannotRedirectDecision(t *testing.T) {
	f := newFixture(t, true, nil)
	plain := httptest.NewServer(http.HandlerFunc(hello))
	defer plain.Close()
	c := f.dialUnix(t)
	defer c.Close()
	resp, body := raw(t, c, fmt.Sprintf("GET http://%s:%s/h HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", hostBoth, port(plain)))
	if resp.StatusCode != 200 || body != "hello from "+hostBoth+":"+port(plain)+"/h" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	c2 := f.dialUnix(t)
	defer c2.Close()
	resp, _ = raw(t, c2, fmt.Sprintf("GET http://%s:%s/h HTTP/1.1\r\nHost: %s\r\n\r\n", hostTenant, port(plain), hostBoth))
	if resp.StatusCode != 403 {
		t.Fatalf("Host header of an allowed name let a refused target through: %s", resp.Status)
	}
}

// A node without a tenant list allows nothing and says why; writing one applies it.
func TestMissingTenantList(t *testing.T) {
	f := newFixture(t, true, nil)
	os.Remove(f.tenant)
	eventually(t, 2*time.Second, "removal seen", func() bool { return len(f.p.Status(0).Patterns) == 0 })
	c := f.dialUnix(t)
	resp, body := raw(t, c, "CONNECT "+hostBoth+":443 HTTP/1.1\r\n\r\n")
	c.Close()
	if resp.StatusCode != 403 || !strings.Contains(body, "does not exist") {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if len(f.p.Findings()) != 0 || !f.p.Status(0).TenantOK {
		t.Fatal("a missing list is not an unreadable one")
	}
	writeTenant(t, f.tenant, testTenant)
	eventually(t, 2*time.Second, "list written", func() bool { return len(f.p.Status(0).Patterns) == 6 })
	st := f.p.Status(5)
	if st.TenantList != f.tenant || st.Patterns[0] != hostBoth || len(st.Recent) != 1 || st.Recent[0].Decision != "deny" {
		t.Fatalf("status %+v", st)
	}
}

func TestCloseEndpointKeepsThePlugin(t *testing.T) {
	f := newFixture(t, true, nil)
	extra, err := f.p.AddPlugin(PluginRules{Plugin: "alpha", Egress: testManifest}, Listen{TCP: true, Credential: testCredential})
	if err != nil {
		t.Fatal(err)
	}
	f.p.CloseEndpoint(extra)
	if c, err := net.DialTimeout("tcp", extra.TCP.String(), time.Second); err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("closed endpoint still serves")
		}
		c.Close()
	}
	c := f.dialUnix(t)
	defer c.Close()
	if resp, _ := raw(t, c, "GET / HTTP/1.1\r\n\r\n"); resp.StatusCode != 400 {
		t.Fatalf("the plugin's other endpoint: %s", resp.Status)
	}
}

// The tenant folder replaced as a whole (a configuration tool swapping it) is
// followed too.
func TestTenantFolderReplaced(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.PollInterval = time.Second })
	dir := filepath.Dir(f.tenant)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "missing list seen", func() bool { return len(f.p.Status(0).Patterns) == 0 })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTenant(t, f.tenant, hostOther+"\n")
	eventually(t, 3*time.Second, "new folder's list seen", func() bool { return len(f.p.Status(0).Patterns) == 1 })
	time.Sleep(2100 * time.Millisecond) // let the poll re-add the watch
	writeTenant(t, f.tenant, hostOther+"\n"+hostBoth+"\n")
	took := eventually(t, 2*time.Second, "later edit seen", func() bool { return len(f.p.Status(0).Patterns) == 2 })
	// The watch, not the 1 s poll, must have seen it: half the poll interval tells
	// the two apart even on a loaded machine (an addition waits for two identical
	// reads of the list before it applies).
	if took > 500*time.Millisecond {
		t.Errorf("edit in the new folder applied after %v, want well within the 1 s poll (watch not re-added?)", took)
	}
}
