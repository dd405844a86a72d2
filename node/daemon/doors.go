package daemon

import (
	"cmp"
	"time"

	"oz0.ai/node/node/config"
	"oz0.ai/node/node/conncap"
	"oz0.ai/node/node/mcpdoor"
)

// initDoors builds the MCP doors over the gateway and the bounds on callers'
// sessions and connections, from the run configuration (0: the defaults) and
// the descriptor limit.
func (d *Daemon) initDoors() {
	run := d.cfg.Node.Config
	caps := d.met.Caps()
	d.doors = mcpdoor.New(mcpdoor.Options{
		Logger: d.log, Gateway: d.gw,
		SessionCap:          cmp.Or(run.SessionCap, config.DefaultSessionCap),
		SessionCapPerClient: cmp.Or(run.SessionCapPerClient, config.DefaultSessionCapPerClient),
		SessionIdle:         cmp.Or(d.cfg.SessionIdle, 30*time.Minute),
		Caps:                caps, Raise: d.raise,
	})
	connTotal, perPeer := conncap.Budget()
	if d.cfg.ConnCap > 0 {
		connTotal, perPeer = d.cfg.ConnCap, max(1, d.cfg.ConnCap/4)
	}
	d.conns = conncap.New(connTotal, perPeer, caps, d.raise)
}
