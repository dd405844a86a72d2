package metrics

import (
	"sync"

	vm "github.com/VictoriaMetrics/metrics"
)

// Caps are the series of the node's bounds on what its callers hold open: MCP
// sessions and its listeners' connections. Label values are the node's own
// (listener and cap names), never a caller's.
type Caps struct {
	m                   *Metrics
	sessions, handedOff *vm.Gauge
}

// Caps returns the node's cap series, made at first use; nil on a nil Metrics
// (its methods then record nothing).
func (m *Metrics) Caps() *Caps {
	if m == nil {
		return nil
	}
	m.capsOnce.Do(func() {
		m.caps = &Caps{m: m, sessions: m.gauge("oz0_mcp_sessions"), handedOff: m.gauge("oz0_mcp_stdio_sessions_handed_off")}
	})
	return m.caps
}

// Sessions sets how many MCP sessions are open.
func (c *Caps) Sessions(n int) {
	if c != nil {
		c.sessions.Set(float64(n))
	}
}

// SessionEvicted counts a session closed over a cap ("total" or "client").
func (c *Caps) SessionEvicted(capName string) {
	if c != nil {
		c.m.counter("oz0_mcp_sessions_evicted_total", "cap", capName).Inc()
	}
}

// HandedOff counts a stdio session handed off (+1) or ended (-1).
func (c *Caps) HandedOff(delta int) {
	if c != nil {
		c.handedOff.Add(float64(delta))
	}
}

// Conns sets how many connections a listener holds.
func (c *Caps) Conns(listener string, n int) {
	if c != nil {
		c.m.gauge("oz0_connections", "listener", listener).Set(float64(n))
	}
}

// ConnRefused counts a connection a listener closed over a cap ("total" or
// "peer").
func (c *Caps) ConnRefused(listener, capName string) {
	if c != nil {
		c.m.counter("oz0_connections_refused_total", "cap", capName, "listener", listener).Inc()
	}
}

// capsState is the lazily made Caps of a Metrics.
type capsState struct {
	capsOnce sync.Once
	caps     *Caps
}
