package launch

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// attachHandOff gives a sandbox started outside the node's process (exec, hook)
// its proxy and its resolver (transparent egress) the way the node gives its
// servers theirs. For bwrap, the command opens the loopback listener inside the
// sandbox's network namespace and hands it to the proxy behind the plugin's
// socket (its own or the running node's), instead of starting a bridge process
// inside — the largest part of such a start — and serves the sandbox's resolver
// there as its gate (the proxy behind the socket decides; the command only
// relays). A non-root command does the same through a helper started with
// nsenter (egress.OpenNetns). Under gVisor the in-sandbox bridge is the gate.
func attachHandOff(spec *sandbox.Spec) {
	if !proxied(spec) {
		return
	}
	if spec.Backend == policy.BackendGVisor {
		spec.Proxy.Resolver = sandbox.ResolverAddr
		return
	}
	if spec.Backend != policy.BackendBwrap {
		return
	}
	if os.Geteuid() != 0 && !egress.NsenterAvailable() {
		// Without nsenter a non-root command cannot open sockets in the sandbox:
		// its tool gets the proxy variables (and the bridge) only.
		slog.Warn("nsenter (util-linux) not found; the sandbox has no transparent egress, only the proxy variables")
		return
	}
	sock := filepath.Join(spec.Proxy.SocketDir, spec.Proxy.SocketName)
	port := spec.Proxy.Port
	if port == 0 {
		port = sandbox.DefaultProxyPort
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	spec.Proxy.Resolver = sandbox.ResolverAddr
	spec.Proxy.Attach = func(ns string) (func(), error) {
		n, err := egress.OpenNetns(ns) // non-root: a helper opens the sockets there
		if err != nil {
			return nil, err
		}
		ln, err := n.Listen(addr)
		if err != nil {
			n.Close()
			return nil, err
		}
		defer ln.Close() // once handed off, the proxy holds its own copy
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			n.Close()
			return nil, fmt.Errorf("proxy listener in %s is not TCP", ns)
		}
		hc, err := egress.HandOff(tl, sock)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("hand the sandbox's proxy listener to %s: %w", sock, err)
		}
		g, err := egress.NetnsGate(n, sock, netip.MustParseAddr(sandbox.ResolverAddr))
		if err != nil {
			hc.Close()
			n.Close()
			return nil, fmt.Errorf("the sandbox's resolver: %w", err)
		}
		return func() { g.Close(); hc.Close(); n.Close() }, nil
	}
}
