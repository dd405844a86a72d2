package plan

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/egressrule"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/userconf"
)

const planSecret = "sk-plan-REAL-91c2"

// A secret reaches a sandboxed server as its sentinel, unique to plugin, server
// and key; the value goes only to the proxy's rules, bound where the manifest
// says; the sandbox trusts the node's CA bundle; nothing the node shows holds
// the value (docs/promises.md §17).
func TestSecretsReachSandboxedToolsOnlyAsSentinels(t *testing.T) {
	d := dataFolder(t, "secret-api", "remote-mcp")
	if _, err := egress.NodeCA(d); err != nil {
		t.Fatal(err)
	}
	if err := userconf.Save(d, "secret-api", userconf.Values{"api_key": planSecret, "beta_key": "beta-REAL"}); err != nil {
		t.Fatal(err)
	}
	if err := userconf.Save(d, "remote-mcp", userconf.Values{"api_key": planSecret, "STREAM_PORT": "1", "SSE_PORT": "2", "DEAD_PORT": "3"}); err != nil {
		t.Fatal(err)
	}
	n := strictNode(d, config.Run{})
	p, err := n.One("secret-api")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := p.ServerSpec("main", Proxy{Sockets: true})
	if err != nil {
		t.Fatal(err)
	}
	sentinel := egressrule.Sentinel("secret-api", "main", "api_key")
	env := envOf(spec)
	if env["API_KEY"] != sentinel || sentinel == egressrule.Sentinel("secret-api", "", "api_key") || sentinel == egressrule.Sentinel("other", "main", "api_key") {
		t.Errorf("API_KEY=%q, want the sentinel unique to plugin, server and key %q", env["API_KEY"], sentinel)
	}
	for _, k := range sandbox.CAEnv {
		if env[k] != sandbox.InnerCABundle {
			t.Errorf("%s=%q, want the node's bundle %s", k, env[k], sandbox.InnerCABundle)
		}
	}
	var onSystem bool
	for _, m := range spec.Mounts {
		if m.Source == d.EgressCABundle() && m.Dest == "/etc/ssl/certs/ca-certificates.crt" && !m.Writable {
			onSystem = true
		}
		if strings.HasPrefix(m.Source, d.EgressCA()) {
			t.Errorf("the CA's key file is bound into the sandbox: %+v", m)
		}
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil && !onSystem {
		t.Errorf("the bundle is not bound over the system bundle: %+v", spec.Mounts)
	}
	b, _ := json.Marshal(spec)
	if strings.Contains(string(b), planSecret) {
		t.Errorf("the spec holds the secret: %s", b)
	}
	rules := p.EgressRules()
	want := egressrule.Secret{Key: "api_key", Server: "main", Sentinel: sentinel, Value: planSecret, Hosts: []string{"allowed.test"}}
	if i := slices.IndexFunc(rules.Secrets, func(s egressrule.Secret) bool { return s.Key == "api_key" }); i < 0 || !secretEqual(rules.Secrets[i], want) {
		t.Errorf("proxy rules %+v, want %+v", rules.Secrets, want)
	}
	shown, _ := json.Marshal(p.Shown().Manifest)
	bind, _ := json.Marshal(p.Secrets())
	if strings.Contains(string(shown), planSecret) || strings.Contains(string(bind), planSecret) {
		t.Errorf("what the node shows holds the secret:\n%s\n%s", shown, bind)
	}
	if bs := p.Secrets(); len(bs) != 2 || bs[0].Key != "api_key" || bs[0].By != "manifest" || len(bs[0].Uses) != 1 ||
		bs[0].Uses[0].Where != "server main" || !slices.Equal(bs[0].Uses[0].Hosts, []string{"allowed.test"}) || bs[0].Uses[0].Sentinel != sentinel {
		t.Errorf("bindings %s", bind)
	}

	// A remote server's headers are the node's own: the gateway sends the value.
	r, err := n.One("remote-mcp")
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Manifest.Server("stream").Remote.Headers["Authorization"]; h != "Bearer "+planSecret {
		t.Errorf("remote header %q, want the value (the node sends it, no sandbox holds it)", h)
	}
	if len(r.EgressRules().Secrets) != 0 {
		t.Errorf("a remote server's secret went to the proxy's rules: %+v", r.EgressRules().Secrets)
	}
}

func secretEqual(a, b egressrule.Secret) bool {
	return a.Key == b.Key && a.Server == b.Server && a.Sentinel == b.Sentinel && a.Value == b.Value && slices.Equal(a.Hosts, b.Hosts) && a.Body == b.Body
}

// An unsandboxed server (mode off) runs as the node's user with no proxy in
// between: it gets the value, and status says why. The operator's --plain does
// the same, with a finding; --secret makes any key a secret.
func TestSecretsUnsandboxedPlainAndNamedByTheOperator(t *testing.T) {
	d := dataFolder(t, "secret-api", "needs-config")
	if err := userconf.SaveConfig(d, "secret-api", userconf.Config{Values: userconf.Values{"api_key": planSecret}}); err != nil {
		t.Fatal(err)
	}
	off := strictNode(d, config.Run{})
	off.Config.Mode = policy.Off
	p, err := off.One("secret-api")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := p.ServerSpec("main", Proxy{})
	if err != nil {
		t.Fatal(err)
	}
	if env := envOf(spec); env["API_KEY"] != planSecret || env["SSL_CERT_FILE"] != "" {
		t.Errorf("unsandboxed: API_KEY=%q SSL_CERT_FILE=%q, want the value and no bundle", env["API_KEY"], env["SSL_CERT_FILE"])
	}
	if u := p.Secrets()[0].Uses; len(u) != 1 || !strings.HasPrefix(u[0].Holds, "unsandboxed") {
		t.Errorf("uses %+v, want the server holding the value, unsandboxed", u)
	}

	if err := userconf.SaveConfig(d, "secret-api", userconf.Config{Values: userconf.Values{"api_key": planSecret}, Plain: []string{"api_key"}}); err != nil {
		t.Fatal(err)
	}
	n := strictNode(d, config.Run{})
	p, err = n.One("secret-api")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ = p.ServerSpec("main", Proxy{})
	if envOf(spec)["API_KEY"] != planSecret || !slices.ContainsFunc(p.Decision.Findings, func(f api.Finding) bool { return f.Code == api.CodeSecretPlain }) {
		t.Errorf("--plain: API_KEY=%q findings %+v", envOf(spec)["API_KEY"], p.Decision.Findings)
	}

	// needs-config's LEVEL is a plain ${VAR}; the operator names it a secret.
	if err := userconf.SaveConfig(d, "needs-config", userconf.Config{Values: userconf.Values{"api_token": "t", "LEVEL": "gold"}, Secret: []string{"LEVEL"}}); err != nil {
		t.Fatal(err)
	}
	p, err = n.One("needs-config")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ = p.ServerSpec("main", Proxy{})
	if got := envOf(spec)["SERVICE_LEVEL"]; got != egressrule.Sentinel("needs-config", "main", "LEVEL") {
		t.Errorf("SERVICE_LEVEL=%q, want its sentinel once the operator names it a secret", got)
	}
	if keys := p.SentinelKeys("main"); !slices.Equal(keys, []string{"LEVEL", "api_token"}) {
		t.Errorf("sentinel keys %v", keys)
	}
}
