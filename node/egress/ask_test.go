package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A connection only the tenant's list refuses waits for Config.Ask: allowed, it
// goes through, is audited with the approval's rule and survives a change of the
// list; refused, the client reads why. Hosts the manifest refuses are never
// asked about.
func TestAskHoldsATenantRefusalForTheOperator(t *testing.T) {
	ts := httptest.NewServer(nil)
	defer ts.Close()
	port := port(ts)
	var mu sync.Mutex
	var asked []Question
	allow := true
	f := newFixture(t, true, func(c *Config) {
		c.Ask = func(_ context.Context, q Question) Answer {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, q)
			if allow {
				return Answer{Allow: true, Rule: "approved once by ops (approval 1)"}
			}
			return Answer{Rule: "denied by ops (approval 2)"}
		}
	})
	c := f.dialUnix(t)
	defer c.Close()
	resp, _ := rawHead(t, c, fmt.Sprintf("CONNECT %s:%s HTTP/1.1\r\n\r\n", hostManifest, port))
	if resp != 200 {
		t.Fatalf("an approved connection: %d", resp)
	}
	// The tenant's list changes: the approved tunnel stays open.
	writeTenant(t, f.tenant, testTenant+"added.example.com\n")
	time.Sleep(300 * time.Millisecond)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("the approved tunnel was closed by a list change: %v", err)
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1") {
		t.Fatalf("the approved tunnel was closed by a list change: %q %v", buf, err)
	}

	mu.Lock()
	allow = false
	mu.Unlock()
	c2 := f.dialUnix(t)
	r, body := raw(t, c2, fmt.Sprintf("CONNECT %s:%s HTTP/1.1\r\n\r\n", hostManifest, port))
	c2.Close()
	if r.StatusCode != 403 || !strings.Contains(body, "An operator was asked and did not allow it: denied by ops (approval 2)") {
		t.Fatalf("a refused approval: %d %q", r.StatusCode, body)
	}
	// Not the manifest's host: never asked.
	c3 := f.dialUnix(t)
	raw(t, c3, fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", hostTenant))
	c3.Close()
	mu.Lock()
	if len(asked) != 2 || asked[0].Plugin != "alpha" || asked[0].Host != hostManifest || !strings.Contains(asked[0].Refusal, "does not name "+hostManifest) {
		t.Fatalf("asked %+v", asked)
	}
	mu.Unlock()
	c.Close()
	var allowLine, denyLine bool
	for _, d := range f.readAudit(t) {
		allowLine = allowLine || d.Decision == "allow" && d.Host == hostManifest && d.Rule == "approved once by ops (approval 1)"
		denyLine = denyLine || d.Decision == "deny" && d.Host == hostManifest && d.Rule == "denied by ops (approval 2)"
	}
	if !allowLine || !denyLine {
		t.Fatal("the approval's rule is not in the audit lines")
	}
}

// rawHead sends a request and reads only its status line and headers, leaving
// the connection open (a tunnel).
func rawHead(t *testing.T, c net.Conn, req string) (int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	var b strings.Builder
	one := make([]byte, 1)
	for !strings.HasSuffix(b.String(), "\r\n\r\n") {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("%q: %v after %q", firstLine(req), err, b.String())
		}
		b.WriteByte(one[0])
	}
	var code int
	fmt.Sscanf(b.String(), "HTTP/1.1 %d", &code)
	return code, b.String()
}
