// Package config is the configuration of a running node (`oz0-node run`): the
// run flags are registered, validated and rendered back as a canonical command line
// here, from one table (flags.go), so `run`, `service install` and `service unit`
// take the same set by construction and a unit holds exactly what `run` accepts.
package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"sync"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/policy"
)

// Backends a node may be asked for.
var Backends = []string{"auto", "bwrap", "gvisor", "landlock", "none", "seatbelt"}

// Run is a validated run configuration. A running node's status carries it in
// this form (InStatus, FromStatus), so commands that act as the running node
// would (exec, sandbox show, plugin show, plugin install) read it typed and never
// parse flag text back.
type Run struct {
	DataDir        string             `json:"data_dir,omitempty"`
	Mode           policy.Mode        `json:"mode"`
	Exemptions     []policy.Exemption `json:"exemptions,omitempty"`
	Backend        string             `json:"backend,omitempty"`
	PluginBackends map[string]string  `json:"plugin_backends,omitempty"` // plugin name → gvisor
	Labels         map[string]string  `json:"labels,omitempty"`
	AllowCIDRs     []netip.Prefix     `json:"egress_allow_cidrs,omitempty"`
	MCPListen      string             `json:"mcp_listen,omitempty"`     // optional 127.0.0.1:PORT
	MetricsListen  string             `json:"metrics_listen,omitempty"` // optional 127.0.0.1:PORT for Prometheus
	// HookGrants let one plugin's hooks see another plugin's calls.
	HookGrants []policy.HookGrant `json:"hook_grants,omitempty"`
	// HookProject names the plugins whose hooks read the agent session's project
	// (its cwd), read-only.
	HookProject []string `json:"hook_project,omitempty"`
	// HookApprove names the plugins whose hooks speak the whole hook protocol for
	// every tool, not only their own (docs/promises.md §15).
	HookApprove []string `json:"hook_approve,omitempty"`
	// HookEgress names the plugins whose hooks keep their egress when they
	// receive the agent's data (docs/promises.md §16).
	HookEgress []string `json:"hook_egress,omitempty"`
	// ROPaths are, per plugin, host paths the operator shows its sandboxes
	// read-only, at their own paths (--plugin-ro-path NAME=PATH), sorted.
	ROPaths map[string][]string `json:"plugin_ro_paths,omitempty"`
	// TrustD are the plugins granted macOS's certificate trust daemon, sorted.
	TrustD []string `json:"tls_trustd,omitempty"`
	// NotifyRate is how many notifications a second each server may send before
	// the rest are dropped (0: the node's default).
	NotifyRate int `json:"server_notify_rate,omitempty"`
	// ApprovalWait is how long a request the tenant's lists refuse waits for an
	// operator's answer (0: refused at once).
	ApprovalWait time.Duration `json:"approval_wait,omitempty"`
	// OTLPEndpoint is where traces go over OTLP ("" unless the flag names one;
	// the OTEL_EXPORTER_OTLP_* variables may also turn tracing on).
	OTLPEndpoint string `json:"otlp_endpoint,omitempty"`
	// CallTimeout is how long the node waits for one tool call's answer
	// (0: DefaultCallTimeout).
	CallTimeout time.Duration `json:"call_timeout,omitempty"`
	// PingEvery and PingTimeout are the servers' liveness check: how often an
	// idle server is pinged and how long it has to answer (0: the defaults).
	PingEvery   time.Duration `json:"server_ping_every,omitempty"`
	PingTimeout time.Duration `json:"server_ping_timeout,omitempty"`
	// SessionCap and SessionCapPerClient bound the MCP sessions open at once,
	// in total and per client (0: the defaults).
	SessionCap          int `json:"mcp_session_cap,omitempty"`
	SessionCapPerClient int `json:"mcp_session_cap_per_client,omitempty"`
}

// The defaults of the flags whose 0 means "the node's default".
const (
	DefaultCallTimeout         = 10 * time.Minute
	MaxCallTimeout             = 24 * time.Hour
	DefaultPingEvery           = 30 * time.Second
	DefaultPingTimeout         = 10 * time.Second
	DefaultSessionCap          = 1000
	DefaultSessionCapPerClient = 200
	MaxSessionCap              = 100000
)

// InStatus is the configuration as a running node's status carries it
// (api.NodeInfo.Run).
func (r Run) InStatus() json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		// Every field is a plain value, a string map or a netip.Prefix.
		panic(fmt.Sprintf("config: encode run configuration: %v", err))
	}
	return b
}

// FromStatus is the run configuration a running node's status carries; false
// when it carries none (no status, or a node that did not write one).
func FromStatus(st *api.Status) (Run, bool) {
	if st == nil || len(st.Node.Run) == 0 {
		return Run{}, false
	}
	var r Run
	if err := json.Unmarshal(st.Node.Run, &r); err != nil {
		return Run{}, false
	}
	return r, true
}

// MaxNotifyRate bounds --server-notify-rate: past it the limit would no longer
// keep a flooding server from costing the node a core.
const MaxNotifyRate = 100000

// DerivedPrefix is reserved for labels the node derives itself.
const DerivedPrefix = "oz0.ai/"

// The label patterns compile at first use: their bounded repetitions make large
// programs, which every command (exec and hook among them) would build at start.
var (
	labelKeyRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	})
	labelValRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
	})
)

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
