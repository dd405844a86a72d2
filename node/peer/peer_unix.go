//go:build linux || darwin

package peer

import (
	"fmt"
	"net"
)

// UID is the user of the process at the other end of a unix socket
// connection, as the kernel recorded it when that process connected.
func UID(c net.Conn) (int, error) {
	uc, ok := Underlying(c).(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("peer credentials: not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("peer credentials: %w", err)
	}
	uid, serr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { uid, serr = fdPeerUID(int(fd)) }); err != nil {
		return -1, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return -1, fmt.Errorf("peer credentials: %w", serr)
	}
	return uid, nil
}
