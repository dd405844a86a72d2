//go:build !linux

package egress

import (
	"errors"
	"net"
)

// Handoffs come only from the bridges of Linux sandboxes.
func listenerFromFD(fd int) (net.Listener, error) {
	closeFDs([]int{fd})
	return nil, errors.New("listener handoff is Linux-only")
}

// HandOff is not available here: the bridge relays.
func HandOff(*net.TCPListener, string) (*net.UnixConn, error) {
	return nil, errors.New("listener handoff is Linux-only")
}
