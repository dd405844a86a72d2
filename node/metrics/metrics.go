// Package metrics is the node's Prometheus instrumentation: one registry of the
// node's own (never the process-wide default), the counters and histograms the
// daemon, gateway and egress proxy feed, and the text exposition served on the
// control socket and on --metrics-listen.
package metrics

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Other is the plugin label of anything not named by an installed plugin, so a
// plugin-supplied or forged name can never add a series.
const Other = "other"

// ServerCount is one series of the servers-by-state gauge; with Server set it
// is one server, whose dropped notifications are counted by name.
type ServerCount struct {
	Plugin, State string
	Servers       int
	Restarts      int
	Server        string
	NotesDropped  int64
}

// Metrics is the node's instrumentation. A nil *Metrics records nothing, so
// packages and tests that run without one need no checks.
type Metrics struct {
	reg *prometheus.Registry
	capsState

	mu      sync.RWMutex
	plugins map[string]bool // installed plugin names: the only plugin label values

	calls         *prometheus.CounterVec
	callSeconds   *prometheus.HistogramVec
	callSeries    sync.Map // callKey → *callSeries: every call's series, looked up without a lock
	egress        *prometheus.CounterVec
	egressBytes   *prometheus.CounterVec
	egressRefused *prometheus.CounterVec
	tenant        *prometheus.CounterVec
	hooks         *prometheus.CounterVec
	sandboxStart  *prometheus.HistogramVec
}

// New builds the metrics.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), plugins: map[string]bool{}}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_tool_calls_total",
		Help: "Tool calls routed to a plugin's server, by outcome: ok, error (the call failed or the tool reported an error), refused (policy) or blocked (a hook).",
	}, []string{"plugin", "outcome"})
	m.callSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "oz0_tool_call_duration_seconds",
		Help:    "Time from a tool call's arrival at the gateway to its answer.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"plugin"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_egress_decisions_total",
		Help: "Egress proxy decisions, by plugin, decision (allow, deny, error) and the rule class that decided.",
	}, []string{"plugin", "decision", "rule"})
	m.egressBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_egress_relayed_bytes_total",
		Help: "Bytes the egress proxy relayed (both ways) for finished connections.",
	}, []string{"plugin"})
	m.egressRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_egress_refused_total",
		Help: "Connections the egress proxy closed before any decision, by plugin and cause (conn-cap, credential).",
	}, []string{"plugin", "cause"})
	m.tenant = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_tenant_list_reloads_total",
		Help: "Changes of the tenant egress list applied, by result (ok, unusable).",
	}, []string{"result"})
	m.hooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oz0_hook_runs_total",
		Help: "Plugin hook runs, by plugin, event and decision (allow, block).",
	}, []string{"plugin", "event", "decision"})
	m.sandboxStart = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "oz0_sandbox_start_duration_seconds",
		Help:    "Time from building a server's sandbox to its MCP session being up, by backend.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30},
	}, []string{"backend"})
	m.reg.MustRegister(m.calls, m.callSeconds, m.egress, m.egressBytes, m.egressRefused, m.tenant, m.hooks, m.sandboxStart,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// CollectServers registers read as the source of the server gauges, read at each
// scrape. The running node calls it once; a second call panics.
func (m *Metrics) CollectServers(read func() []ServerCount) {
	m.reg.MustRegister(&serverCollector{m: m, read: read})
}

// SetPlugins sets the installed plugin names: the plugin label takes only these
// values (and Other).
func (m *Metrics) SetPlugins(names []string) {
	if m == nil {
		return
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	m.mu.Lock()
	m.plugins = set
	m.mu.Unlock()
}

func (m *Metrics) plugin(name string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.plugins[name] {
		return name
	}
	return Other
}

// ToolCall records one routed call.
func (m *Metrics) ToolCall(plugin, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	s := m.toolCallSeries(m.plugin(plugin), outcome)
	s.calls.Inc()
	s.seconds.Observe(took.Seconds())
}

// callKey is a tool call's labels: a plugin label and an outcome.
type callKey struct{ plugin, outcome string }

// callSeries are the series one tool call adds to.
type callSeries struct {
	calls   prometheus.Counter
	seconds prometheus.Observer
}

// toolCallSeries returns a call's series, made at its labels' first call and
// kept (nothing deletes a series): asking the vectors at every call hashed the
// labels and took their locks, which concurrent callers contend for. Both
// labels are bounded (the plugin label by SetPlugins, the outcome by the
// gateway), and so is what is kept.
func (m *Metrics) toolCallSeries(plugin, outcome string) *callSeries {
	k := callKey{plugin, outcome}
	if s, ok := m.callSeries.Load(k); ok {
		return s.(*callSeries)
	}
	s, _ := m.callSeries.LoadOrStore(k, &callSeries{
		calls:   m.calls.WithLabelValues(plugin, outcome),
		seconds: m.callSeconds.WithLabelValues(plugin),
	})
	return s.(*callSeries)
}

// EgressRefused records one connection the proxy closed before any decision.
func (m *Metrics) EgressRefused(plugin, cause string) {
	if m == nil {
		return
	}
	m.egressRefused.WithLabelValues(m.plugin(plugin), cause).Inc()
}

// Egress records one proxy decision ("end" adds the connection's bytes).
func (m *Metrics) Egress(plugin, decision, rule string, bytes int64) {
	if m == nil {
		return
	}
	p := m.plugin(plugin)
	if decision == "end" {
		if bytes > 0 {
			m.egressBytes.WithLabelValues(p).Add(float64(bytes))
		}
		return
	}
	m.egress.WithLabelValues(p, decision, RuleClass(decision, rule)).Inc()
}

// ruleClasses are the rule label's values: the lists a denial names, never the
// entry (a plugin's manifest can hold any number of them).
var ruleClasses = map[string]bool{
	"manifest": true, "server": true, "tenant": true, "manifest+tenant": true, "server+tenant": true,
	"address-guard": true, "tenant-list-unreadable": true, "secret": true,
}

// RuleClass bounds an audited rule ("manifest api.example:443 + tenant … (line 3)",
// "address-guard 10.0.0.1") to the class of list that decided.
func RuleClass(decision, rule string) string {
	if decision == "allow" {
		return "manifest+tenant" // an allow needs both lists
	}
	if decision == "secret" {
		return "secret" // a secret put in (docs/promises.md §17)
	}
	first, _, _ := strings.Cut(rule, " ")
	first = strings.TrimSuffix(first, ":")
	if ruleClasses[first] {
		return first
	}
	return Other
}

// TenantReload records an applied change of the tenant list.
func (m *Metrics) TenantReload(ok bool) {
	if m == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "unusable"
	}
	m.tenant.WithLabelValues(r).Inc()
}

// HookRun records one hook run and whether it blocked.
func (m *Metrics) HookRun(plugin, event string, blocked bool) {
	if m == nil {
		return
	}
	d := "allow"
	if blocked {
		d = "block"
	}
	m.hooks.WithLabelValues(m.plugin(plugin), event, d).Inc()
}

// SandboxStart records how long a server took from sandbox to MCP session.
func (m *Metrics) SandboxStart(backend string, took time.Duration) {
	if m == nil {
		return
	}
	m.sandboxStart.WithLabelValues(backend).Observe(took.Seconds())
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var (
	serversDesc  = prometheus.NewDesc("oz0_servers", "Servers by plugin and state.", []string{"plugin", "state"}, nil)
	restartsDesc = prometheus.NewDesc("oz0_server_restarts_total", "Restarts after crashes of the servers a plugin runs now.", []string{"plugin"}, nil)
	notesDesc    = prometheus.NewDesc("oz0_server_notifications_dropped_total", "Notifications a server sent over the node's per-server rate, dropped.", []string{"plugin", "server"}, nil)
)

// serverCollector reads the supervisor's state at scrape time.
type serverCollector struct {
	m    *Metrics
	read func() []ServerCount
}

func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serversDesc
	ch <- restartsDesc
	ch <- notesDesc
}

func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[[2]string]int{}
	restarts := map[string]int{}
	notes := map[[2]string]int64{}
	for _, s := range c.read() {
		p := c.m.plugin(s.Plugin)
		states[[2]string{p, s.State}] += s.Servers
		restarts[p] += s.Restarts
		if s.Server != "" {
			// A server of no installed plugin adds no series of its own.
			server := s.Server
			if p == Other {
				server = Other
			}
			notes[[2]string{p, server}] += s.NotesDropped
		}
	}
	for k, n := range notes {
		ch <- prometheus.MustNewConstMetric(notesDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for k, n := range states {
		ch <- prometheus.MustNewConstMetric(serversDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for p, n := range restarts {
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(n), p)
	}
}
