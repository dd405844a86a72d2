package api

// AuditRecord is one line of the node's audit stream (<data>/logs/audit.jsonl):
// a tool call, a hook run, an egress decision, an operator's approval, or a line
// of the stream's own. Fields a kind does not use are left out. No line holds a
// secret or a call's arguments: only their SHA-256 digest (docs/audit.md).
type AuditRecord struct {
	// Seq numbers the stream's lines, one by one, across writers, rotations and
	// restarts.
	Seq  uint64 `json:"seq"`
	Time string `json:"time"`
	// Kind: call, hook, egress, approval, or audit (the stream's own lines).
	Kind   string `json:"kind"`
	Plugin string `json:"plugin,omitempty"`
	Server string `json:"server,omitempty"`
	// Egress decisions: where to (the api.EgressDecision fields, in its order);
	// approvals of a host too.
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
	Addr string `json:"addr,omitempty"`
	// Decision: for a call allow, deny or block (a hook blocked it); for a hook
	// run the hook's answer; for egress allow, deny, error or end; for an
	// approval once, always, deny or timeout; for the stream's own lines what
	// happened (rotated, repaired, lost).
	Decision string `json:"decision,omitempty"`
	// Rule is the rule or reason that decided.
	Rule string `json:"rule,omitempty"`
	// Bytes an ended egress connection carried, both ways.
	Bytes int64 `json:"bytes,omitempty"`

	// Tool calls.
	Door      string  `json:"door,omitempty"` // stdio or http
	Path      string  `json:"path,omitempty"` // fast or sdk
	Session   string  `json:"session,omitempty"`
	Tool      string  `json:"tool,omitempty"` // <plugin>__<tool>
	RequestID string  `json:"request_id,omitempty"`
	Seconds   float64 `json:"duration_seconds,omitempty"`
	// Outcome of an allowed call: ok, tool-error (isError), rpc-error (a
	// JSON-RPC error, RPCError its code), no-answer or cancelled.
	Outcome     string `json:"outcome,omitempty"`
	RPCError    int64  `json:"rpc_error,omitempty"`
	ResultBytes int    `json:"result_bytes,omitempty"`
	// ArgsSHA256 is the SHA-256 of the call's arguments in compact JSON.
	ArgsSHA256 string `json:"args_sha256,omitempty"`

	// Hook runs (Tool, Session and Seconds too).
	Event   string   `json:"event,omitempty"`
	Source  string   `json:"source,omitempty"` // agent or gateway
	Network string   `json:"network,omitempty"`
	Dropped []string `json:"dropped,omitempty"`

	// Approvals: the request's id, how many times it was asked and who answered
	// (Tool or Host and Port say what was asked for).
	Approval string `json:"approval,omitempty"`
	Asked    int    `json:"asked,omitempty"`
	By       string `json:"by,omitempty"`

	// The stream's own lines: how many lines rotation has removed so far (every
	// line numbered up to DroppedLines is gone), and what a repair cut.
	DroppedLines uint64 `json:"dropped_lines,omitempty"`
	CutBytes     int64  `json:"cut_bytes,omitempty"`
	// LostLines could not be written (the disk refused them).
	LostLines uint64 `json:"lost_lines,omitempty"`
}

// AuditOfEgress is an egress decision as an audit line.
func AuditOfEgress(d EgressDecision) AuditRecord {
	return AuditRecord{Time: d.Time, Kind: "egress", Plugin: d.Plugin, Server: d.Server, Decision: d.Decision,
		Rule: d.Rule, Host: d.Host, Port: d.Port, Addr: d.Addr, Bytes: d.Bytes, Seconds: d.Seconds}
}

// AuditOfHook is a hook run as an audit line.
func AuditOfHook(h HookRun, session string) AuditRecord {
	return AuditRecord{Time: h.Time, Kind: "hook", Plugin: h.Plugin, Event: h.Event, Tool: h.Tool, Source: h.Source,
		Decision: h.Decision, Rule: h.Reason, Seconds: h.Seconds, Network: h.Network, Dropped: h.Dropped, Session: session}
}
