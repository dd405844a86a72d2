package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/netrule"
)

// PluginRules are one plugin's egress lists and secrets (egressrule.PluginRules).
type PluginRules = egressrule.PluginRules

// compiled is PluginRules parsed into patterns, swapped atomically on update.
type compiled struct {
	plugin  string
	egress  []netrule.Pattern
	servers map[string][]netrule.Pattern
	secrets []*compiledSecret
}

func compile(r PluginRules) (*compiled, error) {
	if r.Plugin == "" {
		return nil, fmt.Errorf("egress rules: empty plugin name")
	}
	c := &compiled{plugin: r.Plugin, servers: map[string][]netrule.Pattern{}}
	var err error
	if c.egress, err = manifest.Patterns(r.Egress); err != nil {
		return nil, fmt.Errorf("plugin %s: egress: %w", r.Plugin, err)
	}
	for name, es := range r.Servers {
		if es == nil {
			continue
		}
		ps, err := manifest.Patterns(es)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: server %s: egress: %w", r.Plugin, name, err)
		}
		c.servers[name] = ps
	}
	if c.secrets, err = compileSecrets(r.Plugin, r.Secrets); err != nil {
		return nil, err
	}
	return c, nil
}

// tenantList is the tenant's list as last read. A non-nil err means it could not be
// read or parsed: everything is denied.
type tenantList struct {
	path     string
	patterns []netrule.Pattern
	lines    []int // line number of each pattern
	missing  bool
	err      error
	read     time.Time // when it was read (a finding's time)
}

// verdict is a decision with its audit rule and the text a refused client reads.
// askable: only the tenant list refused, where the manifest allows the host (an
// operator may approve it: Config.Ask).
type verdict struct {
	allow   bool
	rule    string
	why     string
	askable bool
}

func firstMatch(ps []netrule.Pattern, host string, port int) int {
	for i, p := range ps {
		if p.Match(host, port) {
			return i
		}
	}
	return -1
}

// decide is the whole list decision, pure: the manifest (narrowed by the server's
// list when server has one) AND the tenant list must allow host:port. Address
// literals in forbidden ranges are refused unless an operator range opens them.
// Addresses a name resolves to are checked later, at dial time.
func decide(r *compiled, server string, tl *tenantList, t Target, operatorAllows func(netip.Addr) bool) verdict {
	who := "plugin " + r.plugin
	if server != "" {
		who += " (server " + server + ")"
	}
	if tl.err != nil {
		return verdict{rule: "tenant-list-unreadable", why: fmt.Sprintf(
			"oz0 egress proxy: %s may not reach %s.\n"+
				"The tenant's egress list %s cannot be used: %v\n"+
				"Until it is fixed the proxy refuses every connection. An operator fixes that line; the change applies within a second, no restart.\n",
			who, t, tl.path, tl.err)}
	}
	if t.IP.IsValid() && netrule.Forbidden(t.IP) && !operatorAllows(t.IP) {
		return verdict{rule: "address-guard", why: fmt.Sprintf(
			"oz0 egress proxy: %s may not reach %s.\n"+
				"%s is a loopback, private, link-local, CGNAT, ULA, multicast, reserved or IPv4-embedding address; no list can allow it (only the operator's --egress-allow-cidr can).\n",
			who, t, t.IP)}
	}
	mi := firstMatch(r.egress, t.Host, t.Port)
	si, narrowed := -1, false
	if sp, ok := r.servers[server]; ok && server != "" {
		narrowed = true
		si = firstMatch(sp, t.Host, t.Port)
	}
	ti := firstMatch(tl.patterns, t.Host, t.Port)
	manifestOK := mi >= 0 && (!narrowed || si >= 0)
	if manifestOK && ti >= 0 {
		rule := "manifest " + r.egress[mi].String()
		if narrowed {
			rule += " server " + r.servers[server][si].String()
		}
		rule += fmt.Sprintf(" + tenant %s (line %d)", tl.patterns[ti], tl.lines[ti])
		return verdict{allow: true, rule: rule}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "oz0 egress proxy: %s may not reach %s.\n", who, t)
	var refused []string
	if !manifestOK {
		switch {
		case mi < 0:
			refused = append(refused, "manifest")
			fmt.Fprintf(&b, "Refused by the plugin's manifest: %s is not in its egress list (extensions.\"ai.oz0\".egress). "+
				"The plugin's author adds {\"host\": %q, \"ports\": [%d], \"reason\": \"…\"} and the operator reinstalls the plugin.\n",
				t, t.Host, t.Port)
		default:
			refused = append(refused, "server")
			fmt.Fprintf(&b, "Refused by the manifest entry of server %s: its own egress list narrows the plugin's and does not include %s. "+
				"The plugin's author adds it to extensions.\"ai.oz0\".servers.%s.egress and the operator reinstalls the plugin.\n",
				server, t, server)
		}
	}
	if ti < 0 {
		refused = append(refused, "tenant")
		if tl.missing {
			fmt.Fprintf(&b, "Refused by the tenant's egress list %s: the file does not exist, so no host is allowed. ", tl.path)
		} else {
			fmt.Fprintf(&b, "Refused by the tenant's egress list %s: no line allows %s. ", tl.path, t)
		}
		fmt.Fprintf(&b, "An operator adds a line %q (or a leading-dot suffix such as .example.com) to that file; it applies within a second, no restart.\n", t.Host)
	}
	return verdict{rule: strings.Join(refused, "+"), why: b.String(), askable: manifestOK && ti < 0}
}
