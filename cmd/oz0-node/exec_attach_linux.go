package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// attachExecEgress gives a root exec's bwrap sandbox its proxy the way a root node
// gives its servers theirs: exec opens the loopback listener inside the sandbox's
// network namespace and hands it to the proxy behind the plugin's socket (exec's
// own or the running node's), instead of starting a bridge process inside — the
// largest part of exec's start. The proxy serves it as the endpoint it arrived on.
func attachExecEgress(spec *sandbox.Spec) {
	if os.Geteuid() != 0 || spec.Backend != policy.BackendBwrap || spec.Network != policy.NetProxy ||
		spec.Proxy == nil || spec.Proxy.SocketDir == "" {
		return
	}
	sock := filepath.Join(spec.Proxy.SocketDir, spec.Proxy.SocketName)
	port := spec.Proxy.Port
	if port == 0 {
		port = sandbox.DefaultProxyPort
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
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
		return func() { hc.Close() }, nil
	}
}
