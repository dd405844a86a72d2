package main

import (
	"fmt"
	"net/netip"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/sandbox"
)

// ListenIn serves the egress endpoint of a plugin's server ("" its own) inside a
// sandbox's network namespace.
func (a *egressAdapter) ListenIn(plugin, server, netnsPath, addr string) (func(), error) {
	rules, ok := a.Rules(plugin)
	if !ok {
		return nil, fmt.Errorf("egress: plugin %s has no rules", plugin)
	}
	// A non-root node opens the sockets there through a helper (egress.Netns);
	// it lives as long as the endpoint, which opens more as names resolve.
	ns, err := egress.OpenNetns(netnsPath)
	if err != nil {
		return nil, err
	}
	ln, err := ns.Listen(addr)
	if err != nil {
		ns.Close()
		return nil, err
	}
	// The node is also the sandbox's resolver there (transparent egress): its
	// resolv.conf names sandbox.ResolverAddr (daemon.attachEgress).
	ep, err := a.p.AddPlugin(rules, egress.Listen{Listener: ln, Server: server,
		Netns: netnsPath, Namespace: ns, Resolver: netip.MustParseAddr(sandbox.ResolverAddr)})
	if err != nil {
		ln.Close()
		ns.Close()
		return nil, err
	}
	return func() { a.p.CloseEndpoint(ep); ns.Close() }, nil
}
