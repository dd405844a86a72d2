package plan

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/netrule"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/userconf"
)

// Secrets stay outside the sandbox (docs/promises.md §17). A value the operator
// or the manifest marks secret reaches a sandboxed tool as a sentinel unique to
// the plugin, its server and the key; the proxy endpoint of that server puts
// the value in on requests to the hosts it is bound to. A tool that runs
// unsandboxed (as the node's user, with no proxy in between) and a remote
// server's headers (sent by the node itself) get the value.

// secretUse is one reference to a secret, as the expansion met it.
type secretUse struct {
	key   string
	scope manifest.Scope
	// sentinel is what the tool got in place of the value ("" when it got the
	// value, holds says why).
	sentinel string
	holds    string
	set      bool
}

// where names a scope as status does.
func where(sc manifest.Scope) string {
	if sc.Hook >= 0 {
		return "hooks"
	}
	return "server " + sc.Server
}

// endpointServer is the egress endpoint a scope's tool speaks through: its
// server's, or the plugin's own for its hooks.
func endpointServer(sc manifest.Scope) string {
	if sc.Hook >= 0 {
		return ""
	}
	return sc.Server
}

// holdsValue says why the tool at sc gets a secret's value itself ("" when it
// gets a sentinel): it runs unsandboxed, or it is a remote server, whose
// headers the node sends itself (docs/architecture.md).
func holdsValue(m *manifest.Manifest, d *policy.Decision, sc manifest.Scope) string {
	if sc.Hook >= 0 {
		if sc.Hook < len(d.Hooks) && d.Hooks[sc.Hook].Action == policy.Sandboxed {
			return ""
		}
		return "unsandboxed: the hooks run as the node's user, with no proxy in between"
	}
	if s := m.Server(sc.Server); s != nil && s.IsRemote() {
		return "remote server: no plugin code runs for it; the node sends its headers itself"
	}
	if t, _ := d.Server(sc.Server); t.Action != policy.Sandboxed {
		return "unsandboxed: the server runs as the node's user, with no proxy in between"
	}
	return ""
}

// withSecrets expands m for the tools that will run it: each secret referenced
// where a sandboxed tool runs becomes that scope's sentinel. It returns the
// manifest to start from, the one to show (other operator values redacted) and
// every use of a secret it met.
func withSecrets(m *manifest.Manifest, plugin string, vars manifest.Vars, cfg userconf.Config, d *policy.Decision) (run, shown *manifest.Manifest, uses []secretUse) {
	seen := map[string]bool{}
	lookup := func(show bool) func(sc manifest.Scope, name string) (string, bool) {
		return func(sc manifest.Scope, name string) (string, bool) {
			v, ok := cfg.Values.Lookup(name)
			key := strings.TrimPrefix(name, manifest.UserConfigPrefix)
			by := cfg.SecretBy(m, key)
			u := secretUse{key: key, scope: sc, set: ok && v != ""}
			switch {
			case by == "plain":
				u.holds = "the operator hands it over as it is (--plain)"
			case by != "":
				u.holds = holdsValue(m, d, sc)
				if u.holds == "" && u.set {
					u.sentinel = egressrule.Sentinel(plugin, endpointServer(sc), key)
				}
			}
			if by != "" && !show {
				id := key + "\x00" + where(sc)
				if !seen[id] {
					seen[id] = true
					uses = append(uses, u)
				}
			}
			switch {
			case !ok:
				return "", false
			case u.sentinel != "":
				return u.sentinel, true
			case show && !userconf.Public(m, name):
				return Redacted, true
			}
			return v, true
		}
	}
	run, _ = m.ExpandScoped(vars, lookup(false))
	shown, _ = m.ExpandScoped(vars, lookup(true))
	return run, shown, uses
}

// secretRules are what the proxy needs: per sentinel given out, its value and
// binding. The values live in the node's process, never in a sandbox.
func secretRules(m *manifest.Manifest, cfg userconf.Config, uses []secretUse) []egressrule.Secret {
	var out []egressrule.Secret
	for _, u := range uses {
		if u.sentinel == "" {
			continue
		}
		v, _ := cfg.Values.Lookup(u.key)
		b := m.Secrets[u.key]
		out = append(out, egressrule.Secret{Key: u.key, Server: endpointServer(u.scope), Sentinel: u.sentinel, Value: v,
			Hosts: slices.Clone(b.Hosts), Body: b.Body})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Server < out[j].Server
	})
	return out
}

// egressOf is the egress list a scope's endpoint allows: its server's own when
// it narrows the plugin's, else the plugin's.
func egressOf(m *manifest.Manifest, sc manifest.Scope) []manifest.EgressEntry {
	if sc.Hook < 0 {
		if s := m.Server(sc.Server); s != nil && s.Egress != nil {
			return s.Egress
		}
	}
	return m.Egress
}

func patternsText(es []manifest.EgressEntry) []string {
	ps, _ := manifest.Patterns(es)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// overlaps reports whether some host may match both patterns.
func overlaps(a, b netrule.Pattern) bool {
	if len(a.Ports) > 0 && len(b.Ports) > 0 && !slices.ContainsFunc(a.Ports, func(p int) bool { return slices.Contains(b.Ports, p) }) {
		return false
	}
	switch {
	case !a.Suffix && !b.Suffix:
		return a.Host == b.Host
	case a.Suffix && !b.Suffix:
		return a.Match(b.Host, 0) || len(a.Ports) > 0 && a.Match(b.Host, a.Ports[0])
	case !a.Suffix && b.Suffix:
		return overlaps(b, a)
	}
	return strings.HasSuffix(a.Host, b.Host) || strings.HasSuffix(b.Host, a.Host)
}

// secretBindings are the plugin's secrets as status and plugin show list them,
// and the findings about them: a binding that names no host its server may
// reach, a secret the operator hands over plain.
func secretBindings(name string, m, run *manifest.Manifest, cfg userconf.Config, uses []secretUse) ([]api.SecretBinding, []api.Finding) {
	keys := map[string]bool{}
	for _, k := range append(slices.Clone(cfg.Secret), cfg.Plain...) {
		keys[k] = true
	}
	for k := range m.Secrets {
		keys[k] = true
	}
	for k, o := range m.UserConfig {
		if o.Sensitive {
			keys[k] = true
		}
	}
	var out []api.SecretBinding
	var findings []api.Finding
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	}) {
		by := cfg.SecretBy(m, k)
		if by == "" {
			continue
		}
		v, ok := cfg.Values[k]
		b := m.Secrets[k]
		sb := api.SecretBinding{Key: k, By: by, Set: ok && v != "", Body: b.Body, Reason: b.Reason}
		for _, u := range uses {
			if u.key != k {
				continue
			}
			su := api.SecretUse{Where: where(u.scope), Sentinel: u.sentinel, Holds: u.holds}
			if u.holds == "" {
				allowed := egressOf(run, u.scope)
				su.Hosts = patternsText(allowed)
				if len(b.Hosts) > 0 {
					su.Hosts = slices.Clone(b.Hosts)
					if !bindingReachable(b.Hosts, allowed) {
						findings = append(findings, api.Finding{Code: api.CodeSecretUnbound, Severity: api.SevWarning,
							Subject: name + "/" + strings.TrimPrefix(where(u.scope), "server "),
							Message: fmt.Sprintf("the manifest binds secret %s to %s, which %s's egress (%s) does not reach: the proxy never puts it in",
								k, strings.Join(b.Hosts, ", "), where(u.scope), strings.Join(patternsText(allowed), ", ")),
							Fix: "the plugin's author binds the secret to a host in the egress list (extensions.\"ai.oz0\".secrets." + k + ".hosts)"})
					}
				}
			}
			sb.Uses = append(sb.Uses, su)
		}
		if by == "plain" && sb.Set {
			findings = append(findings, api.Finding{Code: api.CodeSecretPlain, Severity: api.SevInfo, Subject: name,
				Message: fmt.Sprintf("%s's value %s is handed to its tools as it is (plugin config --plain): the tool holds it, and can send it wherever its egress reaches", name, k),
				Fix:     "oz0-node plugin config " + name + " --secret " + k})
		}
		out = append(out, sb)
	}
	return out, findings
}

// bindingReachable reports whether a manifest's hosts for a secret meet the
// egress list of the server that uses it.
func bindingReachable(hosts []string, egressList []manifest.EgressEntry) bool {
	allowed, _ := manifest.Patterns(egressList)
	for _, h := range hosts {
		hp, err := netrule.ParsePattern(h)
		if err != nil {
			continue
		}
		for _, a := range allowed {
			if overlaps(hp, a) {
				return true
			}
		}
	}
	return false
}

// caBundle is the CA bundle a plugin's sandboxes trust: the node's when the
// plugin has a secret bound somewhere (so the proxy may terminate TLS for it)
// and the node wrote one; "" otherwise.
func (p *Plugin) caBundle() string {
	if len(p.secretRules) == 0 {
		return ""
	}
	b := p.node.Dir.EgressCABundle()
	if fi, err := os.Lstat(b); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return b
}

// EgressRules are the plugin's lists and secrets as its proxy endpoints apply
// them (egress.Endpoints.Set).
func (p *Plugin) EgressRules() egressrule.PluginRules {
	return egressrule.PluginRules{Plugin: p.Installed.Name, Egress: p.Manifest.Egress, Servers: p.Manifest.ServerEgress(),
		Secrets: slices.Clone(p.secretRules)}
}

// Secrets are the plugin's secrets as status and plugin show list them: where
// each is bound, never a value.
func (p *Plugin) Secrets() []api.SecretBinding { return p.bindings }

// SentinelKeys are the keys whose values the plugin's tools hold as sentinels,
// by scope ("server NAME", "hooks"): a change of them restarts what holds them,
// so no tool keeps a value it should not (docs/promises.md §17).
func (p *Plugin) SentinelKeys(server string) []string {
	var out []string
	for _, r := range p.secretRules {
		if r.Server == server {
			out = append(out, r.Key)
		}
	}
	return out
}

// systemCABundles are the system bundle files of this host (regular files, not
// links) that a Linux sandbox sees: the node's bundle is bound over each, for
// tools that read the system's file and no variable.
func systemCABundles() []string {
	var out []string
	for _, f := range egressrule.SystemRootFiles {
		if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
			out = append(out, f)
		}
	}
	return out
}
