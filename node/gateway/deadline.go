package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrCallTimeout marks a call the node ended because its server did not answer
// within the node's call deadline (Options.CallTimeout).
var ErrCallTimeout = errors.New("call deadline passed")

// deadline bounds one call to rt's server by the node's call deadline. The
// caller's own cancel still ends the call at once (ctx); finish turns the error
// of a call that ran out of time into one naming the server and the deadline,
// and tells OnCallTimeout, which checks the server is still there.
func (g *Gateway) deadline(ctx context.Context, rt *route) (context.Context, func(error) error) {
	if g.opts.CallTimeout <= 0 {
		return ctx, func(err error) error { return err }
	}
	cause := &callTimeout{plugin: rt.plugin, server: rt.server, d: g.opts.CallTimeout}
	cctx, cancel := context.WithTimeoutCause(ctx, g.opts.CallTimeout, cause)
	return cctx, func(err error) error {
		timedOut := err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), ErrCallTimeout)
		cancel()
		if !timedOut {
			return err
		}
		if g.opts.OnCallTimeout != nil {
			g.opts.OnCallTimeout(rt.plugin, rt.server)
		}
		return cause
	}
}

// callTimeout is the cause of a call that ran out of time; its text is made only
// when read, as most calls never time out.
type callTimeout struct {
	plugin, server string
	d              time.Duration
}

func (e *callTimeout) Error() string {
	return fmt.Sprintf("%v: server %s/%s did not answer within the node's call deadline of %s (--call-timeout); the call was cancelled",
		ErrCallTimeout, e.plugin, e.server, e.d)
}

func (e *callTimeout) Unwrap() error { return ErrCallTimeout }
