//go:build !linux

package egress

import (
	"errors"
	"net"
)

// netnsOpenerFor: network namespaces are Linux's; elsewhere transparent egress
// cannot be served.
func netnsOpenerFor(nsPath string) netnsOpener {
	err := errors.New("transparent egress needs Linux network namespaces")
	return netnsOpener{
		tcp: func(string) (net.Listener, error) { return nil, err },
		udp: func(string) (net.PacketConn, error) { return nil, err },
	}
}
