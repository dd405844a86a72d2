package install

import (
	"os"
	"strconv"

	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// attachInNetns serves the build's proxy inside a bwrap sandbox's own network
// namespace on a root node (no bridge process, no socket bound in); nil where that
// cannot be done.
func attachInNetns(px *egress.Proxy, rules egress.PluginRules, backend string) func(string) (func(), error) {
	if backend != policy.BackendBwrap || os.Geteuid() != 0 {
		return nil
	}
	addr := "127.0.0.1:" + strconv.Itoa(sandbox.DefaultProxyPort)
	return func(ns string) (func(), error) {
		ln, err := egress.ListenInNetns(ns, addr)
		if err != nil {
			return nil, err
		}
		ep, err := px.AddPlugin(rules, egress.Listen{Listener: ln})
		if err != nil {
			ln.Close()
			return nil, err
		}
		return func() { px.CloseEndpoint(ep) }, nil
	}
}
