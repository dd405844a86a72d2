package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// attachExecEgress gives exec's sandbox its proxy and its resolver (transparent
// egress) the way the node gives its servers theirs. On a root node, for bwrap,
// exec opens the loopback listener inside the sandbox's network namespace and
// hands it to the proxy behind the plugin's socket (exec's own or the running
// node's), instead of starting a bridge process inside — the largest part of
// exec's start — and serves the sandbox's resolver there as its gate (the proxy
// behind the socket decides; exec only relays). Under gVisor the in-sandbox bridge
// is the gate.
func attachExecEgress(spec *sandbox.Spec) {
	if spec.Network != policy.NetProxy || spec.Proxy == nil || spec.Proxy.SocketDir == "" {
		return
	}
	if spec.Backend == policy.BackendGVisor {
		spec.Proxy.Resolver = sandbox.ResolverAddr
		return
	}
	if os.Geteuid() != 0 || spec.Backend != policy.BackendBwrap {
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
		ln, err := egress.ListenInNetns(ns, addr)
		if err != nil {
			return nil, err
		}
		defer ln.Close() // once handed off, the proxy holds its own copy
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			return nil, fmt.Errorf("exec: proxy listener in %s is not TCP", ns)
		}
		hc, err := egress.HandOff(tl, sock)
		if err != nil {
			return nil, fmt.Errorf("exec: hand the sandbox's proxy listener to %s: %w", sock, err)
		}
		g, err := egress.NetnsGate(ns, sock, netip.MustParseAddr(sandbox.ResolverAddr))
		if err != nil {
			hc.Close()
			return nil, fmt.Errorf("exec: the sandbox's resolver: %w", err)
		}
		return func() { g.Close(); hc.Close() }, nil
	}
}
