package main

import (
	"fmt"

	"oz0.ai/node/node/egress"
)

// ListenIn serves a plugin's egress endpoint inside a sandbox's network namespace.
func (a *egressAdapter) ListenIn(plugin, netnsPath, addr string) (func(), error) {
	a.mu.Lock()
	rules, ok := a.rules[plugin]
	a.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("egress: plugin %s has no rules", plugin)
	}
	ln, err := egress.ListenInNetns(netnsPath, addr)
	if err != nil {
		return nil, err
	}
	ep, err := a.p.AddPlugin(rules, egress.Listen{Listener: ln})
	if err != nil {
		ln.Close()
		return nil, err
	}
	return func() { a.p.CloseEndpoint(ep) }, nil
}
