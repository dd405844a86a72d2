package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Caps are the series of the node's bounds on what its callers hold open: MCP
// sessions and its listeners' connections. Label values are the node's own
// (listener and cap names), never a caller's.
type Caps struct {
	sessions   prometheus.Gauge
	evicted    *prometheus.CounterVec
	conns      *prometheus.GaugeVec
	connRefuse *prometheus.CounterVec
	handedOff  prometheus.Gauge
}

// Caps returns the node's cap series, registered at first use; nil on a nil
// Metrics (its methods then record nothing).
func (m *Metrics) Caps() *Caps {
	if m == nil {
		return nil
	}
	m.capsOnce.Do(func() {
		c := &Caps{
			sessions: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "oz0_mcp_sessions",
				Help: "MCP sessions open on the node's MCP doors (HTTP and stdio).",
			}),
			evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "oz0_mcp_sessions_evicted_total",
				Help: "MCP sessions the node closed to stay within its session cap, by cap (total, client).",
			}, []string{"cap"}),
			conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "oz0_connections",
				Help: "Connections open on each of the node's listeners.",
			}, []string{"listener"}),
			connRefuse: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "oz0_connections_refused_total",
				Help: "Connections the node's listeners closed at once over their cap, by listener and cap (total, peer).",
			}, []string{"listener", "cap"}),
			handedOff: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "oz0_mcp_stdio_sessions_handed_off",
				Help: "stdio MCP sessions the node serves on the client's own pipes, handed to it by `oz0-node mcp` (no bridge relays them).",
			}),
		}
		m.reg.MustRegister(c.sessions, c.evicted, c.conns, c.connRefuse, c.handedOff)
		m.caps = c
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
		c.evicted.WithLabelValues(capName).Inc()
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
		c.conns.WithLabelValues(listener).Set(float64(n))
	}
}

// ConnRefused counts a connection a listener closed over a cap ("total" or
// "peer").
func (c *Caps) ConnRefused(listener, capName string) {
	if c != nil {
		c.connRefuse.WithLabelValues(listener, capName).Inc()
	}
}

// capsState is the lazily made Caps of a Metrics.
type capsState struct {
	capsOnce sync.Once
	caps     *Caps
}
