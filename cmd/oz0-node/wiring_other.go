//go:build !linux

package main

import "errors"

// ListenIn needs Linux network namespaces; elsewhere the proxy is reached another way.
func (a *egressAdapter) ListenIn(plugin, server, netnsPath, addr string) (func(), error) {
	return nil, errors.New("egress endpoints inside network namespaces need Linux")
}
