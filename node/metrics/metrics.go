// Package metrics is the node's Prometheus instrumentation: the node's own set
// of series (never a process-wide default), the counters and histograms the
// daemon, gateway and egress proxy feed, and the text exposition served on the
// control socket and on --metrics-listen.
//
// It is built on VictoriaMetrics/metrics rather than Prometheus' client_golang:
// the latter links the protobuf runtime, whose initialisers page about 3 MB of
// the binary into every oz0-node process (docs/performance.md, "What 25 MB
// would take").
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
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
	set *vm.Set
	capsState

	mu      sync.RWMutex
	plugins map[string]bool // installed plugin names: the only plugin label values
	servers func() []ServerCount

	callSeries sync.Map // callKey → *callSeries: every call's series, looked up without a lock
}

// families are the type and help text of the node's families, written once
// each at a scrape.
var families = map[string][2]string{
	"oz0_tool_calls_total":                   {"counter", "Tool calls routed to a plugin's server, by outcome: ok, error (the call failed or the tool reported an error), refused (policy) or blocked (a hook)."},
	"oz0_tool_call_duration_seconds":         {"histogram", "Time from a tool call's arrival at the gateway to its answer."},
	"oz0_egress_decisions_total":             {"counter", "Egress proxy decisions, by plugin, decision (allow, deny, error) and the rule class that decided."},
	"oz0_egress_relayed_bytes_total":         {"counter", "Bytes the egress proxy relayed (both ways) for finished connections."},
	"oz0_egress_refused_total":               {"counter", "Connections the egress proxy closed before any decision, by plugin and cause (conn-cap, credential)."},
	"oz0_tenant_list_reloads_total":          {"counter", "Changes of the tenant egress list applied, by result (ok, unusable)."},
	"oz0_hook_runs_total":                    {"counter", "Plugin hook runs, by plugin, event and decision (allow, block)."},
	"oz0_sandbox_start_duration_seconds":     {"histogram", "Time from building a server's sandbox to its MCP session being up, by backend."},
	"oz0_servers":                            {"gauge", "Servers by plugin and state."},
	"oz0_server_restarts_total":              {"counter", "Restarts after crashes of the servers a plugin runs now."},
	"oz0_server_notifications_dropped_total": {"counter", "Notifications a server sent over the node's per-server rate, dropped."},
	"oz0_mcp_sessions":                       {"gauge", "MCP sessions open on the node's MCP doors (HTTP and stdio)."},
	"oz0_mcp_sessions_evicted_total":         {"counter", "MCP sessions the node closed to stay within its session cap, by cap (total, client)."},
	"oz0_connections":                        {"gauge", "Connections open on each of the node's listeners."},
	"oz0_connections_refused_total":          {"counter", "Connections the node's listeners closed at once over their cap, by listener and cap (total, peer)."},
	"oz0_mcp_stdio_sessions_handed_off":      {"gauge", "stdio MCP sessions the node serves on the client's own pipes, handed to it by `oz0-node mcp` (no bridge relays them)."},
}

var (
	callBuckets    = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	sandboxBuckets = []float64{.05, .1, .25, .5, 1, 2, 5, 10, 30}
	metadataOnce   sync.Once
)

// New builds the metrics.
func New() *Metrics {
	// Prometheus reads a family's type from its TYPE line, which the library
	// writes only when asked (a process-wide switch; the node's process is the
	// only writer of its exposition).
	metadataOnce.Do(func() { vm.ExposeMetadata(true) })
	return &Metrics{set: vm.NewSet(), plugins: map[string]bool{}}
}

// series is a family's series name with its labels, given as name, value
// pairs in the order of their names (as Prometheus' own clients write them).
func series(family string, kv ...string) string {
	if len(kv) == 0 {
		return family
	}
	var b strings.Builder
	b.WriteString(family)
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, kv[i+1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// labelEscaper escapes a label value as the text format wants.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func (m *Metrics) counter(family string, kv ...string) *vm.Counter {
	return m.set.GetOrCreateCounter(series(family, kv...))
}

func (m *Metrics) gauge(family string, kv ...string) *vm.Gauge {
	return m.set.GetOrCreateGauge(series(family, kv...), nil)
}

// CollectServers registers read as the source of the server gauges, read at each
// scrape. The running node calls it once; a second call panics.
func (m *Metrics) CollectServers(read func() []ServerCount) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.servers != nil {
		panic("metrics: CollectServers called twice")
	}
	m.servers = read
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
	s.seconds.Update(took.Seconds())
}

// callKey is a tool call's labels: a plugin label and an outcome.
type callKey struct{ plugin, outcome string }

// callSeries are the series one tool call adds to.
type callSeries struct {
	calls   *vm.Counter
	seconds *vm.PrometheusHistogram
}

// toolCallSeries returns a call's series, made at its labels' first call and
// kept (nothing deletes a series): asking the set at every call built the
// series' name and took the set's lock, which concurrent callers contend for. Both
// labels are bounded (the plugin label by SetPlugins, the outcome by the
// gateway), and so is what is kept.
func (m *Metrics) toolCallSeries(plugin, outcome string) *callSeries {
	k := callKey{plugin, outcome}
	if s, ok := m.callSeries.Load(k); ok {
		return s.(*callSeries)
	}
	s, _ := m.callSeries.LoadOrStore(k, &callSeries{
		calls:   m.counter("oz0_tool_calls_total", "outcome", outcome, "plugin", plugin),
		seconds: m.set.GetOrCreatePrometheusHistogramExt(series("oz0_tool_call_duration_seconds", "plugin", plugin), callBuckets),
	})
	return s.(*callSeries)
}

// EgressRefused records one connection the proxy closed before any decision.
func (m *Metrics) EgressRefused(plugin, cause string) {
	if m == nil {
		return
	}
	m.counter("oz0_egress_refused_total", "cause", cause, "plugin", m.plugin(plugin)).Inc()
}

// Egress records one proxy decision ("end" adds the connection's bytes).
func (m *Metrics) Egress(plugin, decision, rule string, bytes int64) {
	if m == nil {
		return
	}
	p := m.plugin(plugin)
	if decision == "end" {
		if bytes > 0 {
			m.counter("oz0_egress_relayed_bytes_total", "plugin", p).AddInt64(bytes)
		}
		return
	}
	m.counter("oz0_egress_decisions_total", "decision", decision, "plugin", p, "rule", RuleClass(decision, rule)).Inc()
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
	m.counter("oz0_tenant_list_reloads_total", "result", r).Inc()
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
	m.counter("oz0_hook_runs_total", "decision", d, "event", event, "plugin", m.plugin(plugin)).Inc()
}

// SandboxStart records how long a server took from sandbox to MCP session.
func (m *Metrics) SandboxStart(backend string, took time.Duration) {
	if m == nil {
		return
	}
	m.set.GetOrCreatePrometheusHistogramExt(series("oz0_sandbox_start_duration_seconds", "backend", backend), sandboxBuckets).Update(took.Seconds())
}

// Handler serves the node's series, then the Go runtime's and the process's,
// in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		m.set.WritePrometheus(&b)
		m.writeServers(&b)
		vm.WriteProcessMetrics(&b)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(withHelp(b.Bytes()))
	})
}

// withHelp is the exposition with the node's families' help text on their
// HELP lines, which the library leaves bare.
func withHelp(text []byte) []byte {
	out := bytes.NewBuffer(make([]byte, 0, len(text)+4096))
	for line := range bytes.Lines(text) {
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = bytes.TrimSpace(name)
			if f, ok := families[string(name)]; ok {
				fmt.Fprintf(out, "# HELP %s %s\n", name, f[1])
				continue
			}
		}
		out.Write(line)
	}
	return out.Bytes()
}

// writeServers writes the server families from the supervisor's state, read
// at the scrape.
func (m *Metrics) writeServers(w io.Writer) {
	m.mu.RLock()
	read := m.servers
	m.mu.RUnlock()
	if read == nil {
		return
	}
	states := map[[2]string]int{}
	restarts := map[string]int{}
	notes := map[[2]string]int64{}
	for _, s := range read() {
		p := m.plugin(s.Plugin)
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
	var lines []string
	family := func(name string) {
		if len(lines) > 0 {
			sort.Strings(lines)
			fmt.Fprintf(w, "# HELP %s\n# TYPE %s %s\n%s", name, name, families[name][0], strings.Join(lines, ""))
		}
		lines = lines[:0]
	}
	for k, n := range notes {
		lines = append(lines, fmt.Sprintf("%s %d\n", series("oz0_server_notifications_dropped_total", "plugin", k[0], "server", k[1]), n))
	}
	family("oz0_server_notifications_dropped_total")
	for k, n := range states {
		lines = append(lines, fmt.Sprintf("%s %d\n", series("oz0_servers", "plugin", k[0], "state", k[1]), n))
	}
	family("oz0_servers")
	for p, n := range restarts {
		lines = append(lines, fmt.Sprintf("%s %d\n", series("oz0_server_restarts_total", "plugin", p), n))
	}
	family("oz0_server_restarts_total")
}
