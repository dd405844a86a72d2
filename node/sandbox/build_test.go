package sandbox

import (
	"strings"
	"testing"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// A host-loopback proxy port (auto, Seatbelt, Landlock) is reachable by every
// local process, so the tool's proxy URLs carry its endpoint's credential there;
// inside a Linux sandbox's own network the endpoint needs none and the URLs carry
// none; an unsandboxed tool gets no proxy variables at all.
func TestProxyURLsCarryTheCredentialOnlyForHostPorts(t *testing.T) {
	const cred = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		os       string
		backend  string
		net      policy.Network
		action   policy.Action
		hostPort bool
		http     string
		socks    string
	}{
		{"linux", policy.BackendBwrap, policy.NetProxy, policy.Sandboxed, false, "http://127.0.0.1:3128", "socks5h://127.0.0.1:3128"},
		{"linux", policy.BackendGVisor, policy.NetProxy, policy.Sandboxed, false, "http://127.0.0.1:3128", "socks5h://127.0.0.1:3128"},
		{"linux", policy.BackendBwrap, policy.NetHostProxyVars, policy.Sandboxed, true, "http://oz0:" + cred + "@127.0.0.1:4242", "socks5h://oz0:" + cred + "@127.0.0.1:4242"},
		{"linux", policy.BackendLandlock, policy.NetProxy, policy.Sandboxed, true, "http://oz0:" + cred + "@127.0.0.1:4242", "socks5h://oz0:" + cred + "@127.0.0.1:4242"},
		{"linux", policy.BackendLandlock, policy.NetHostProxyVars, policy.Sandboxed, true, "http://oz0:" + cred + "@127.0.0.1:4242", "socks5h://oz0:" + cred + "@127.0.0.1:4242"},
		{"darwin", policy.BackendSeatbelt, policy.NetProxy, policy.Sandboxed, true, "http://oz0:" + cred + "@127.0.0.1:4242", "socks5h://oz0:" + cred + "@127.0.0.1:4242"},
		{"linux", policy.BackendBwrap, policy.NetHost, policy.Unsandboxed, false, "", ""},
		{"darwin", policy.BackendSeatbelt, policy.NetHost, policy.Unsandboxed, false, "", ""},
	} {
		if got := HostPort(c.os, c.backend, c.net); got != c.hostPort {
			t.Errorf("HostPort(%s, %s, %s) = %v", c.os, c.backend, c.net, got)
		}
		tg := policy.Target{Kind: "server", Name: "s", Action: c.action, Backend: c.backend, Network: c.net}
		h := Host{OS: c.os, DataDir: "/d", PluginDir: "/d/plugins/p/c", Home: "/d/homes/p",
			ProxySocketDir: "/d/run/egress/p/server-1", ProxyPort: 4242, ProxyCredential: cred}
		spec, err := Build(&policy.Decision{Plugin: "p"}, tg, &manifest.Manifest{Name: "p"}, "server", []string{"/bin/true"}, "", nil, h, manifest.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, kv := range spec.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if env["HTTP_PROXY"] != c.http || env["https_proxy"] != c.http || env["ALL_PROXY"] != c.socks {
			t.Errorf("%s %s %s: HTTP_PROXY %q https_proxy %q ALL_PROXY %q, want %q and %q", c.os, c.backend, c.net, env["HTTP_PROXY"], env["https_proxy"], env["ALL_PROXY"], c.http, c.socks)
		}
		for _, kv := range spec.Argv {
			if strings.Contains(kv, cred) {
				t.Errorf("%s %s: the credential is in the argv", c.os, c.net)
			}
		}
		if c.hostPort && c.action == policy.Sandboxed && (spec.Proxy == nil || spec.Proxy.Port != 4242 || spec.Proxy.SocketDir != "" || spec.Bridge != "") {
			t.Errorf("%s %s %s: a host-port sandbox gets the endpoint's port and no socket or bridge: %+v, bridge %q", c.os, c.backend, c.net, spec.Proxy, spec.Bridge)
		}
		for _, m := range spec.Mounts {
			if c.hostPort && m.Source == h.ProxySocketDir {
				t.Errorf("%s %s %s: the proxy's socket folder is bound into a host-port sandbox", c.os, c.backend, c.net)
			}
		}
		if !c.hostPort && strings.Contains(strings.Join(spec.Env, "\n"), cred) {
			t.Errorf("%s %s: the credential reaches a tool that has no host port", c.os, c.net)
		}
	}
}
