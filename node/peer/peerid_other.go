//go:build !linux

package peer

import "net"

// Who says who is at the other end of c: its address (a TCP peer), or
// "unix" for a unix socket, whose only users are the node's own and root.
func Who(c net.Conn) (peer, client string) {
	if a, ok := Underlying(c).RemoteAddr().(*net.TCPAddr); ok {
		return "address " + a.IP.String(), "address " + a.IP.String()
	}
	return "unix", "unix"
}
