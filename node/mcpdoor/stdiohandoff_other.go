//go:build !linux && !darwin

package mcpdoor

import (
	"errors"
	"net"
	"os"
)

// readFirst reads the first bytes a caller sent; no descriptors travel here.
func readFirst(c net.Conn) ([]byte, []int, error) {
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	return buf[:n], nil, err
}

func pipesOf([]int) (in, out *os.File, err error) {
	return nil, nil, errors.New("handoff: descriptors cannot be passed on this system")
}

func closeFDs([]int) {}
