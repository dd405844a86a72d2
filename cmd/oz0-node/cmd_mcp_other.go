//go:build !linux && !darwin

package main

import (
	"context"
	"net"
)

// handOff: descriptors cannot be passed here; the bridge relays.
func handOff(context.Context, *net.UnixConn, bool) (bool, error) { return false, nil }

func blockingConn(conn *net.UnixConn) nodeConn { return conn }
