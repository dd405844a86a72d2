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

// deadline bounds one call to rt's server by the node's call deadline (nil:
// there is none). The caller's own cancel still ends the call at once (ctx);
// finish turns the error of a call that ran out of time into one naming the
// server and the deadline, and tells OnCallTimeout, which checks the server is
// still there.
func (g *Gateway) deadline(ctx context.Context, rt *route) (context.Context, *callDeadline) {
	if g.opts.CallTimeout <= 0 {
		return ctx, nil
	}
	d := &callDeadline{g: g, parent: ctx, cause: callTimeout{plugin: rt.plugin, server: rt.server, d: g.opts.CallTimeout}}
	d.ctx, d.cancel = context.WithTimeoutCause(ctx, g.opts.CallTimeout, &d.cause)
	return d.ctx, d
}

// callDeadline is one call's deadline: its context and the cause it ends with
// in one allocation, as it is made for every call.
type callDeadline struct {
	g           *Gateway
	parent, ctx context.Context
	cancel      context.CancelFunc
	cause       callTimeout
}

func (d *callDeadline) finish(err error) error {
	if d == nil {
		return err
	}
	timedOut := err != nil && d.parent.Err() == nil && errors.Is(context.Cause(d.ctx), ErrCallTimeout)
	d.cancel()
	if !timedOut {
		return err
	}
	if d.g.opts.OnCallTimeout != nil {
		d.g.opts.OnCallTimeout(d.cause.plugin, d.cause.server)
	}
	return &d.cause
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
