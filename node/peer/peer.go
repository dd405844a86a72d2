// Package peer says who is at the other end of a connection the node accepted:
// the user (a unix socket's credentials, a loopback TCP peer's socket owner) and,
// where the kernel says, the process.
package peer

import (
	"context"
	"net"
)

// Underlying unwraps a connection the node wrapped (Unwrap() net.Conn) to the
// one accepted.
func Underlying(c net.Conn) net.Conn {
	for {
		w, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			return c
		}
		c = w.Unwrap()
	}
}

// connKey keeps a request's connection in its context.
type connKey struct{}

// WithConn is an http.Server's ConnContext: a request knows its connection,
// and so its peer.
func WithConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ConnOf is the connection a request came on (WithConn), or nil.
func ConnOf(ctx context.Context) net.Conn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return c
}
