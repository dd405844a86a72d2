//go:build !linux

package egress

import (
	"errors"
	"net"
)

var errNoNetns = errors.New("transparent egress needs Linux network namespaces")

// netnsOpenerFor: network namespaces are Linux's; elsewhere transparent egress
// cannot be served.
func netnsOpenerFor(nsPath string) netnsOpener {
	return netnsOpener{
		tcp: func(string) (net.Listener, error) { return nil, errNoNetns },
		udp: func(string) (net.PacketConn, error) { return nil, errNoNetns },
	}
}

// Netns is Linux's; elsewhere it opens nothing.
type Netns struct{}

// OpenNetns fails: network namespaces are Linux's.
func OpenNetns(string) (*Netns, error) { return nil, errNoNetns }

// Listen fails.
func (n *Netns) Listen(string) (net.Listener, error) { return nil, errNoNetns }

// ListenPacket fails.
func (n *Netns) ListenPacket(string) (net.PacketConn, error) { return nil, errNoNetns }

// Close does nothing.
func (n *Netns) Close() error { return nil }

func (n *Netns) opener() netnsOpener { return netnsOpenerFor("") }

// NsenterAvailable is false: there are no network namespaces to enter.
func NsenterAvailable() bool { return false }
