//go:build !darwin && !linux

package main

import "oz0.ai/node/node/sandbox"

// platformBackends is empty where oz0-node has no sandbox backend: every plugin
// runs at tier 0, and the node says so.
func platformBackends() []sandbox.Backend { return nil }
