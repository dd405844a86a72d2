//go:build !linux

package install

import "oz0.ai/node/node/egress"

// attachInNetns: only Linux sandboxes have a network namespace to serve in.
func attachInNetns(*egress.Proxy, egress.PluginRules, string) func(string) (func(), error) {
	return nil
}
