package install

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/manifest"
)

// installEgress is an egress proxy of the install's own: the node's proxy code,
// address guard included, whose manifest and tenant lists are both exactly the
// hosts one fetch needs. Builds (npm in the build sandbox) and the fetches of
// what a plugin names beside its own repository (its submodules, an MCPB bundle)
// go through one, so a host the plugin names is reached only as the operator
// allows any plugin's egress: public addresses, and ranges opened with
// --egress-allow-cidr.
type installEgress struct {
	px    *egress.Proxy
	name  string
	rules egress.PluginRules
	hosts []string // host:port, as messages name them
}

// newInstallEgress starts a proxy reaching only hosts (host and port each). The
// tenant list is written in staging st; the proxy is closed with Close.
func newInstallEgress(st, name, reason string, hosts []hostPort, allow []netip.Prefix, log *slog.Logger) (*installEgress, error) {
	var lines []string
	e := &installEgress{name: name, rules: egress.PluginRules{Plugin: name}}
	for _, h := range hosts {
		e.rules.Egress = append(e.rules.Egress, manifest.EgressEntry{Host: h.host, Ports: []int{h.port}, Reason: reason})
		lines = append(lines, h.host)
		e.hosts = append(e.hosts, h.String())
	}
	f, err := os.CreateTemp(st, "egress-")
	if err != nil {
		return nil, fmt.Errorf("%s egress: %w", reason, err)
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s egress: %w", reason, err)
	}
	px, err := egress.New(egress.Config{TenantListPath: f.Name(), AllowCIDRs: allow, Logger: log, PollOnly: true})
	if err != nil {
		return nil, fmt.Errorf("%s egress: %w", reason, err)
	}
	e.px = px
	return e, nil
}

// loopback opens the proxy on a port of the host's loopback, behind a fresh
// credential, and returns its URL with the credential in it (for a tool of the
// node's own, run outside any sandbox: git, or the node's HTTP client).
func (e *installEgress) loopback() (*url.URL, error) {
	var b [24]byte
	rand.Read(b[:])
	cred := hex.EncodeToString(b[:])
	ep, err := e.px.AddPlugin(e.rules, egress.Listen{TCP: true, Credential: cred})
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "http", User: url.UserPassword("oz0", cred), Host: ep.TCP.String()}, nil
}

func (e *installEgress) Close() { e.px.Close() }

// refusals says what the proxy refused, for an error: per refused host, the
// address and the flag that admits it when the address guard refused it.
func (e *installEgress) refusals() string {
	st, ok := e.px.Stats(e.name)
	switch {
	case !ok:
		return ""
	case st.Denied > 0:
		return explainDenials(st, strings.Join(e.hosts, ", "))
	case st.Errors > 0 && st.Allowed == 0:
		return fmt.Sprintf("the install's egress proxy could not reach %s (%d connection(s) allowed by its lists failed: no route or no such name, or the host did not answer)", strings.Join(e.hosts, ", "), st.Errors)
	}
	return ""
}

// explainDenials turns a proxy's denials into what an operator can act on: a host
// whose address the guard refuses (loopback, private, link-local…) is named with
// that address and the --egress-allow-cidr that admits it (a registry mirror or
// a server on a private network); any other host was not one the fetch may reach.
func explainDenials(st egress.Stats, allowed string) string {
	seen := map[string]bool{}
	var out []string
	for _, d := range st.LastDenials {
		hp := d.Host + ":" + strconv.Itoa(d.Port)
		var s string
		if a, ok := strings.CutPrefix(d.Rule, "address-guard "); ok {
			pfx := a + "/32"
			if addr, err := netip.ParseAddr(a); err == nil && addr.Is6() {
				pfx = a + "/128"
			}
			s = fmt.Sprintf("%s resolves to %s, an address the egress guard refuses (loopback, private, link-local or reserved); if that is where it should be reached (a mirror on your network), admit it with --egress-allow-cidr %s", hp, a, pfx)
		} else {
			s = fmt.Sprintf("%s is not among the hosts this step may reach (%s)", hp, allowed)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("the install's egress proxy refused %d connection(s); it reaches only %s", st.Denied, allowed)
	}
	return fmt.Sprintf("the install's egress proxy refused %d connection(s): %s", st.Denied, strings.Join(out, "; "))
}

// hostPort is one host a fetch may reach.
type hostPort struct {
	host string
	port int
}

func (h hostPort) String() string { return h.host + ":" + strconv.Itoa(h.port) }

// urlHostPort is the host and port of an http(s) URL.
func urlHostPort(u *url.URL) (hostPort, error) {
	h := hostPort{host: strings.ToLower(u.Hostname()), port: 443}
	if u.Scheme == "http" {
		h.port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return h, fmt.Errorf("%s: port %q", u.Redacted(), p)
		}
		h.port = n
	}
	if h.host == "" {
		return h, fmt.Errorf("%s: no host", u.Redacted())
	}
	return h, nil
}
