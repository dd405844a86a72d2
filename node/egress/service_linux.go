package egress

import (
	"fmt"
	"net/netip"

	"oz0.ai/node/node/sandbox"
)

// ListenIn serves the egress endpoint of a plugin's server ("" its own) on addr
// inside a sandbox's network namespace (a /proc/PID/ns/net path), and answers the
// sandbox's DNS there (transparent egress: its resolv.conf names
// sandbox.ResolverAddr); detach closes both.
func (s *Service) ListenIn(plugin, server, netnsPath, addr string) (detach func(), err error) {
	rules, ok := s.Rules(plugin)
	if !ok {
		return nil, fmt.Errorf("egress: plugin %s has no rules", plugin)
	}
	// A non-root node opens the sockets there through a helper (Netns); it lives
	// as long as the endpoint, which opens more as names resolve.
	ns, err := OpenNetns(netnsPath)
	if err != nil {
		return nil, err
	}
	ln, err := ns.Listen(addr)
	if err != nil {
		ns.Close()
		return nil, err
	}
	ep, err := s.p.AddPlugin(rules, Listen{Listener: ln, Server: server,
		Netns: netnsPath, Namespace: ns, Resolver: netip.MustParseAddr(sandbox.ResolverAddr)})
	if err != nil {
		ln.Close()
		ns.Close()
		return nil, err
	}
	return func() { s.p.CloseEndpoint(ep); ns.Close() }, nil
}
