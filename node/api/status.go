package api

import "encoding/json"

// Status is the whole status model: what `oz0-node status --json`, GET /v1/status,
// status.json and the TUI show. Field names are stable.
type Status struct {
	Node     NodeInfo     `json:"node"`
	Plugins  []Plugin     `json:"plugins"`
	Exempt   []Exemption  `json:"exemptions"`
	Findings []Finding    `json:"findings"`
	Egress   EgressStatus `json:"egress"`

	// HookGrants are the --plugin-hooks-see grants in force: whose hooks see
	// which other plugin's tool calls.
	HookGrants []HookGrant `json:"hook_visibility"`

	// HookRuns are the latest hook runs, newest first.
	HookRuns []HookRun `json:"hook_runs,omitempty"`

	// ToolRules is the tenant's per-tool rules file as the node reads it.
	ToolRules ToolRulesStatus `json:"tool_rules"`
	// Approvals are the requests waiting for an operator's answer, oldest first
	// (--approval-wait).
	Approvals []Approval `json:"approvals,omitempty"`
	// ApprovalWait is how long a request waits for an answer ("" when requests
	// are refused at once).
	ApprovalWait string `json:"approval_wait,omitempty"`
}

// ToolRulesStatus is the tenant's tool rules file (<data>/tenant/tools).
type ToolRulesStatus struct {
	Path    string `json:"path"`
	Present bool   `json:"present"`
	OK      bool   `json:"ok"` // false: it cannot be used, and every tool call is refused
	Rules   int    `json:"rules"`
	Error   string `json:"error,omitempty"`
}

// Approval is a request waiting for an operator: an egress connection to a host
// the manifest names and the tenant list does not, or a call of a tool the
// tenant's rules refuse.
type Approval struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"` // egress or tool
	Plugin string `json:"plugin"`
	Server string `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"` // <plugin>__<tool>
	Host   string `json:"host,omitempty"`
	Port   int    `json:"port,omitempty"`
	// Reason is the manifest's reason for the host (egress).
	Reason string `json:"reason,omitempty"`
	// Refusal is what refuses it unless an operator allows it.
	Refusal string `json:"refusal"`
	// Asked counts the requests for it since it was first asked; Waiting are
	// those still waiting.
	Asked   int    `json:"asked"`
	Waiting int    `json:"waiting"`
	Since   string `json:"since"`
	Expires string `json:"expires"` // when the oldest waiting request is refused
	// Always says whether "allow always" can answer it: a line in the tenant's
	// file would let it through (not where a deny line refuses it).
	Always bool `json:"always_possible"`
}

// Answers an operator gives an approval.
const (
	AnswerOnce   = "once"
	AnswerAlways = "always"
	AnswerDeny   = "deny"
)

// NodeInfo describes the node as a whole.
type NodeInfo struct {
	Version   string            `json:"version"`
	PID       int               `json:"pid"`
	Started   string            `json:"started"` // RFC 3339
	DataDir   string            `json:"data_dir"`
	OS        string            `json:"os"`
	Root      bool              `json:"root"`
	Tier      int               `json:"tier"`
	Backend   string            `json:"backend"`            // bwrap, gvisor, seatbelt or none
	Backends  []BackendProbe    `json:"backends,omitempty"` // what the probe found
	Mode      string            `json:"mode"`               // strict, auto or off
	Labels    map[string]string `json:"labels"`             // operator and derived
	NotCovers []string          `json:"not_covered"`        // honest limits of this tier
	Users     string            `json:"plugin_users"`       // "per-plugin" or why not
	Control   string            `json:"control,omitempty"`  // control socket path
	MCP       string            `json:"mcp,omitempty"`      // MCP socket path
	Health    string            `json:"health"`             // ok, degraded, failing or stopped
	Updated   string            `json:"updated,omitempty"`  // RFC 3339
	Uptime    string            `json:"uptime,omitempty"`
	// Run is the run configuration the node was started with, as node/config
	// encodes it (config.FromStatus reads it back typed): the mode, exemptions,
	// grants and raised backends that exec, sandbox show and plugin show decide
	// with.
	Run json.RawMessage `json:"run,omitempty"`
}

// BackendProbe is one backend's probe result.
type BackendProbe struct {
	Name    string `json:"name"`
	Works   bool   `json:"works"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Gaps are what the backend cannot keep on this machine (Landlock: per the
	// kernel's Landlock ABI), shown as not covered when it is the node's.
	Gaps []string `json:"gaps,omitempty"`
}

// Plugin is one installed plugin.
type Plugin struct {
	Name        string   `json:"name"`
	ID          string   `json:"id"` // namespace/name
	Version     string   `json:"version,omitempty"`
	Commit      string   `json:"commit"`
	Source      string   `json:"source,omitempty"`
	InstalledBy string   `json:"installed_by,omitempty"`
	InstalledAt string   `json:"installed_at,omitempty"`
	Private     bool     `json:"private"`
	Exempt      bool     `json:"exempt"`
	User        string   `json:"user"` // "uid 1900…" or "node user"
	UID         int      `json:"uid"`
	Backend     string   `json:"backend"`
	Servers     []Server `json:"servers"`
	Hooks       []Hook   `json:"hooks,omitempty"`
	Egress      []string `json:"egress,omitempty"` // manifest entries "host:ports — reason"
	Allowed     int64    `json:"egress_allowed"`
	Denied      int64    `json:"egress_denied"`
	// Refused counts connections the proxy turned away before any decision, by
	// cause: "conn-cap" (the plugin's open-connection cap), "credential".
	Refused map[string]int64 `json:"egress_refused,omitempty"`
	// ProxyPort is the plugin's own egress endpoint on the host's loopback (its
	// hooks' under auto or Seatbelt); 0 if none is open. Its credential is never
	// shown.
	ProxyPort int `json:"proxy_port,omitempty"`
	// HooksSee names the other plugins whose tool calls this plugin's hooks see
	// (--plugin-hooks-see); without a grant they see only its own calls and the
	// agent's own tools.
	HooksSee []string `json:"hooks_see,omitempty"`
	// HooksProject is true when the operator lets this plugin's hooks read the
	// agent session's project (its cwd), read-only (--plugin-hooks-project).
	HooksProject bool `json:"hooks_see_project,omitempty"`
	// HooksApprove is true when the operator lets this plugin's hooks speak the
	// whole hook protocol for every tool (--plugin-hooks-approve); without it they
	// may only narrow what the agent does with tools the plugin does not own.
	HooksApprove bool `json:"hooks_approve,omitempty"`
	// HooksEgress is true when the operator lets this plugin's hooks keep its
	// egress when they receive the agent's data (--plugin-hooks-egress); without
	// it such hook runs have no network at all.
	HooksEgress bool `json:"hooks_egress,omitempty"`
	// ROPaths are host paths the operator shows the plugin's sandboxes read-only
	// (--plugin-ro-path).
	ROPaths []string `json:"ro_paths,omitempty"`
	// TLSTrustD: the operator granted the plugin macOS's certificate trust daemon
	// (--plugin-tls-trustd), which reaches the network outside the proxy.
	TLSTrustD bool `json:"tls_trustd,omitempty"`
	// SandboxDenials are the plugin's most recent Seatbelt denials (macOS), newest
	// first.
	SandboxDenials []SandboxDenial `json:"sandbox_denials,omitempty"`
	// Held says why the plugin is held back (not started): its install record,
	// manifest or the operator's values for it cannot be read. Its servers are
	// those it last ran, each in state held.
	Held string `json:"held,omitempty"`
	// Secrets are the plugin's secrets and where each is bound, never a value
	// (docs/promises.md §17).
	Secrets []SecretBinding `json:"secrets,omitempty"`
}

// SecretBinding is one secret of a plugin: who made it one, and where its value
// goes. Its value is never shown.
type SecretBinding struct {
	Key string `json:"key"`
	// By is who made it a secret: operator (plugin config --secret), manifest
	// (extensions."ai.oz0".secrets), sensitive (userConfig), or plain when the
	// operator hands it to tools as it is (plugin config --plain).
	By  string `json:"by"`
	Set bool   `json:"set"`
	// Body: the manifest has the proxy put it into request bodies too.
	Body bool `json:"body,omitempty"`
	// Reason is the manifest's reason for the binding.
	Reason string      `json:"reason,omitempty"`
	Uses   []SecretUse `json:"uses,omitempty"`
}

// SecretUse is where one server (or the plugin's hooks) uses a secret.
type SecretUse struct {
	// Where is "server NAME" or "hooks".
	Where string `json:"where"`
	// Sentinel is what the tool holds in its place; "" when it holds the value.
	Sentinel string `json:"sentinel,omitempty"`
	// Hosts are where the proxy puts the value in for the sentinel.
	Hosts []string `json:"hosts,omitempty"`
	// Holds says why the tool holds the value itself: unsandboxed, a remote
	// server (the node sends its headers itself), or the operator's --plain.
	Holds string `json:"holds,omitempty"`
}

// SandboxDenial is one operation a plugin's Seatbelt sandbox refused, as the
// kernel reported it. Process and Target are escaped: a plugin chooses them.
type SandboxDenial struct {
	Time      string `json:"time"` // RFC 3339
	Process   string `json:"process"`
	PID       int    `json:"pid"`
	Operation string `json:"operation"`
	Target    string `json:"target,omitempty"`
	Count     int    `json:"count"`
	// Hint is what the operator can do about it, when the node knows.
	Hint string `json:"hint,omitempty"`
}

// Server states.
const (
	StateStarting    = "starting"
	StateRunning     = "running"
	StateBackingOff  = "backing-off"
	StateCrashed     = "crashed"
	StateRefused     = "refused"
	StateExemptRun   = "exempt-running"
	StateStopped     = "stopped"
	StateNotStarted  = "not-started"
	StateUnsandboxed = "unsandboxed-running"
	// StateUnresponsive: the server did not answer the node's liveness check
	// (an MCP ping) within its bound, or never answered initialize; the node
	// ends its calls in flight with that reason and restarts it.
	StateUnresponsive = "unresponsive"
	// StateHeld: the plugin is held back (its install record, manifest or
	// values cannot be read); the server is not started.
	StateHeld = "held"
)

// Server is one MCP server of a plugin.
type Server struct {
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Action   string   `json:"action"`  // sandboxed, unsandboxed or refused
	Sandbox  string   `json:"sandbox"` // bwrap, gvisor, seatbelt or none
	Network  string   `json:"network"` // proxy, host+proxy-vars or host
	User     string   `json:"user"`
	UID      int      `json:"uid"`
	Reasons  []string `json:"reasons"`
	Declared string   `json:"declared_sandbox"` // default, host or own
	Reason   string   `json:"manifest_reason,omitempty"`
	Restarts int      `json:"restarts"`
	PID      int      `json:"pid,omitempty"`
	Since    string   `json:"since,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	// Hidden are the tools a rule of the tenant's keeps out of tools/list (and
	// whose calls it refuses), each with the rule.
	Hidden  []HiddenTool `json:"hidden_tools,omitempty"`
	LastErr []string     `json:"last_stderr,omitempty"`
	// Remote is "http" or "sse" for a remote server (no sandbox; the node connects
	// to it through its egress proxy), and Host is where ("host:port").
	Remote string `json:"remote,omitempty"`
	Host   string `json:"host,omitempty"`
	// ProxyPort is the server's own egress endpoint on the host's loopback
	// (auto, Seatbelt); 0 if none is open. Its credential is never shown.
	ProxyPort int `json:"proxy_port,omitempty"`
	// LogDropped counts the bytes of stderr dropped because the server flooded.
	LogDropped int64 `json:"log_dropped_bytes,omitempty"`
	// NotesDropped counts the notifications dropped because the server sent
	// them faster than its rate.
	NotesDropped int64 `json:"notifications_dropped,omitempty"`
	// OperatorRestarts counts the restarts the operator asked for (oz0-node
	// restart, the TUI's r); Restarts counts those the node did not ask for.
	OperatorRestarts int `json:"operator_restarts,omitempty"`
	// LastRestart says why the server last started again, and when.
	LastRestart string `json:"last_restart,omitempty"`
}

// HiddenTool is a tool a tenant's rule hides.
type HiddenTool struct {
	Tool string `json:"tool"`
	Rule string `json:"rule"`
}

// Hook is one hook of a plugin with its decision.
type Hook struct {
	Event   string   `json:"event"`
	Matcher string   `json:"matcher,omitempty"`
	Action  string   `json:"action"`
	Sandbox string   `json:"sandbox"`
	Reasons []string `json:"reasons,omitempty"`

	// Timeout is how long the node lets it run, in seconds: its manifest's
	// timeout, at most the node's cap; Capped says the manifest asked for more.
	Timeout float64 `json:"timeout_seconds"`
	Capped  bool    `json:"timeout_capped,omitempty"`
}

// Exemption is one --plugin-sandbox-exempt in force and what it matched.
type Exemption struct {
	Flag    string `json:"flag"` // as given: NAME or NAME@COMMIT
	Plugin  string `json:"plugin"`
	Commit  string `json:"commit,omitempty"`
	Matches string `json:"matches"` // "name", "commit", "commit-mismatch", "nothing", "ignored-private"
	Detail  string `json:"detail,omitempty"`
}

// HookGrant is one --plugin-hooks-see WATCHER=OTHER in force and whether both
// plugins are installed.
type HookGrant struct {
	Flag    string `json:"flag"`    // WATCHER=OTHER
	Watcher string `json:"watcher"` // the plugin whose hooks see
	Other   string `json:"other"`   // the plugin whose calls they see
	Matches string `json:"matches"` // "both", or "missing" when either is not installed
	Detail  string `json:"detail,omitempty"`
}

// EgressStatus summarises the proxy.
type EgressStatus struct {
	TenantList string           `json:"tenant_list"`
	TenantOK   bool             `json:"tenant_ok"`
	Patterns   []string         `json:"tenant_patterns,omitempty"`
	Recent     []EgressDecision `json:"recent,omitempty"` // newest first
}

// EgressDecision is one proxy decision as audited.
type EgressDecision struct {
	Time     string `json:"time"`
	Plugin   string `json:"plugin"`
	Server   string `json:"server,omitempty"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Addr     string `json:"addr,omitempty"`
	Decision string `json:"decision"` // allow, deny, error (allowed, unreachable), end (bytes of a finished connection) or secret (a secret put into a request, docs/promises.md §17)
	Rule     string `json:"rule"`     // which list and entry decided
	Bytes    int64  `json:"bytes,omitempty"`
	// Seconds is how long an ended connection was open (end only).
	Seconds float64 `json:"duration_seconds,omitempty"`
}

// Event is one item of the control API's event stream.
type Event struct {
	Type    string          `json:"type"` // status, server, finding, egress, hook, audit
	Time    string          `json:"time"`
	Status  *Status         `json:"status,omitempty"`
	Server  *ServerEvent    `json:"server,omitempty"`
	Finding *Finding        `json:"finding,omitempty"`
	Egress  *EgressDecision `json:"egress,omitempty"`
	Hook    *HookRun        `json:"hook,omitempty"`
	Audit   *AuditRecord    `json:"audit,omitempty"`
}

// HookRun is one run of a plugin's hook: for an agent's forwarded event
// (`oz0-node hook`) or around a gateway call.
type HookRun struct {
	Time     string  `json:"time"`
	Plugin   string  `json:"plugin"`
	Event    string  `json:"event"`
	Tool     string  `json:"tool,omitempty"`
	Source   string  `json:"source"`   // agent or gateway
	Decision string  `json:"decision"` // allow, ask, deny, error, timeout or invalid-output
	Reason   string  `json:"reason,omitempty"`
	Seconds  float64 `json:"duration_seconds"`
	// Project is the folder the hook's sandbox saw read-only ("" when none).
	Project string `json:"project,omitempty"`
	// Network is what the hook's sandbox could reach: proxy (the plugin's
	// egress), isolated (nothing: the event carried the agent's data), host…
	Network string `json:"network,omitempty"`
	// Dropped names what the hook answered beyond its plugin's authority over the
	// event, which the node did not pass on (docs/promises.md §15).
	Dropped []string `json:"dropped,omitempty"`
}

// HookAnswer is the node's answer to an agent's hook event (POST /v1/hooks):
// what `oz0-node hook` exits with and prints, and the runs behind it.
type HookAnswer struct {
	Exit     int       `json:"exit"`
	Stdout   string    `json:"stdout,omitempty"`
	Stderr   string    `json:"stderr,omitempty"`
	Decision string    `json:"decision"`
	Runs     []HookRun `json:"runs"`
}

// ServerEvent is a server state change.
type ServerEvent struct {
	Plugin string `json:"plugin"`
	Server string `json:"server"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// HealthStopped is the health a node writes as it exits cleanly, and what a
// reader should take a health file to mean when its pid no longer runs.
const HealthStopped = "stopped"

// Health is health.json: a small file a supervisor or a probe can read cheaply.
type Health struct {
	Status   string `json:"status"` // ok, degraded, failing or stopped
	PID      int    `json:"pid"`
	Updated  string `json:"updated"`
	Tier     int    `json:"tier"`
	Running  int    `json:"servers_running"`
	Refused  int    `json:"servers_refused"`
	Crashed  int    `json:"servers_crashed"`
	Critical int    `json:"findings_critical"`
}
