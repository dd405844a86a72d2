package backendlinux

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"oz0.ai/node/node/sandbox"
)

// When the node is the sandbox's resolver, the sandbox gets the node's
// resolv.conf and a hosts file with only localhost, never the host's: a host
// file there would name hosts (or a resolver) the lists do not allow.
func TestBwrapResolverReplacesTheHostsResolvConfAndHosts(t *testing.T) {
	withBridge(t, true)
	s := goldenSpec()
	s.Proxy.Resolver = sandbox.ResolverAddr
	p, err := buildBwrap(s, debianInspect)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"/etc/resolv.conf": sandbox.ResolvConf(sandbox.ResolverAddr), "/etc/hosts": sandbox.Hosts}
	for dest, data := range want {
		i := slices.Index(p.Args, dest)
		if i < 2 || p.Args[i-2] != "--file" || slices.Index(p.Args[i+1:], dest) >= 0 {
			t.Fatalf("%s is not given once by --file: %q", dest, p.Args)
		}
		fd, _ := strconv.Atoi(p.Args[i-1])
		src := p.Sources[fd-fdFirstBind]
		if string(src.Data) != string(data) {
			t.Errorf("%s: %q, want the node's %q", dest, src.Data, data)
		}
	}
	for _, src := range p.Sources {
		if src.Data == nil && (src.Path == "/etc/resolv.conf" || src.Path == "/etc/hosts") {
			t.Errorf("the host's %s is still copied in", src.Path)
		}
	}
	if !strings.Contains(string(sandbox.ResolvConf(sandbox.ResolverAddr)), "nameserver 127.0.0.53\n") {
		t.Errorf("resolv.conf: %q", sandbox.ResolvConf(sandbox.ResolverAddr))
	}

	// Without it, the host's files are copied as before.
	p, _ = buildBwrap(goldenSpec(), debianInspect)
	for _, src := range p.Sources {
		if src.Data != nil {
			t.Errorf("a node-written file without a resolver: %s", src.Path)
		}
	}
}
