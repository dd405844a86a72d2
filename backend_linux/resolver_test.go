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
	s.Proxy.Attach = func(string) (func(), error) { return func() {}, nil }
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

	// Without it, the host's files are copied as before; and so they are where
	// nothing in the sandbox could answer on the resolver's port (bwrap without
	// the node's listeners inside: the bridge cannot bind port 53 there).
	noAttach := goldenSpec()
	noAttach.Proxy.Resolver = sandbox.ResolverAddr
	for _, s := range []*sandbox.Spec{goldenSpec(), noAttach} {
		p, _ = buildBwrap(s, debianInspect)
		for _, src := range p.Sources {
			if src.Data != nil && (src.Path == "/etc/resolv.conf" || src.Path == "/etc/hosts") {
				t.Errorf("a node-written file where the node does not answer: %s", src.Path)
			}
		}
		if slices.Contains(p.Command, "--resolver") {
			t.Errorf("a bwrap bridge told to be the resolver: %q", p.Command)
		}
	}
}

// Under gVisor the bridge is the sandbox's gate: it is told the resolver's
// address, and the rootfs carries the node's resolv.conf and hosts in place of
// the host's.
func TestGVisorResolverIsTheBridgeGate(t *testing.T) {
	withBridge(t, true)
	s := goldenSpec()
	s.Backend = "gvisor"
	s.Proxy.Resolver = sandbox.ResolverAddr
	b, err := ociConfig(s, debianInspect, ociOptions{GOARCH: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	args := b.Spec.Process.Args
	if i := slices.Index(args, "--resolver"); i < 0 || args[i+1] != sandbox.ResolverAddr || slices.Index(args, "--") < i {
		t.Errorf("the bridge is not the resolver's gate: %q", args)
	}
	for _, m := range b.Spec.Mounts {
		if m.Destination == "/etc/resolv.conf" || m.Destination == "/etc/hosts" {
			t.Errorf("the host's %s is bound in", m.Destination)
		}
	}
	want := map[string][]byte{"/etc/resolv.conf": sandbox.ResolvConf(sandbox.ResolverAddr), "/etc/hosts": sandbox.Hosts}
	for _, e := range b.Skel {
		if w, ok := want[e.Path]; ok {
			if string(e.Data) != string(w) {
				t.Errorf("%s: %q, want %q", e.Path, e.Data, w)
			}
			delete(want, e.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("not written into the rootfs: %v", want)
	}
	// Without a resolver, the host's files and no gate.
	b, _ = ociConfig(goldenSpec(), debianInspect, ociOptions{GOARCH: "amd64"})
	if slices.Contains(b.Spec.Process.Args, "--resolver") {
		t.Errorf("a gate without a resolver: %q", b.Spec.Process.Args)
	}
}
