//go:build !linux

package egress

import "errors"

// ListenIn needs Linux network namespaces; elsewhere the proxy is reached another
// way (a host-loopback port with a credential).
func (s *Service) ListenIn(plugin, server, netnsPath, addr string) (detach func(), err error) {
	return nil, errors.New("egress endpoints inside network namespaces need Linux")
}
