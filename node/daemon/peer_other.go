//go:build !linux && !darwin

package daemon

import (
	"errors"
	"net"
)

// peerUID cannot tell who connected here: every connection is refused.
func peerUID(net.Conn) (int, error) {
	return -1, errors.New("peer credentials are not supported on this system")
}
