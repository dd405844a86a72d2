//go:build !linux && !darwin

package peer

import (
	"errors"
	"net"
)

// UID cannot tell who connected here: every connection is refused.
func UID(net.Conn) (int, error) {
	return -1, errors.New("peer credentials are not supported on this system")
}
