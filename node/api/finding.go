// Package api holds the node's status model — node, tier, plugins, servers, findings —
// as plain JSON types that the CLI, the control socket, status.json and the TUI share.
package api

import "sort"

// Severity orders findings.
type Severity string

const (
	SevInfo     Severity = "info"
	SevWarning  Severity = "warning"
	SevError    Severity = "error"
	SevCritical Severity = "critical"
)

// Rank orders severities (critical first when sorted descending).
func (s Severity) Rank() int {
	switch s {
	case SevCritical:
		return 3
	case SevError:
		return 2
	case SevWarning:
		return 1
	}
	return 0
}

// Finding is something the operator should know: what, about which subject, and the fix.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	Subject  string   `json:"subject"`
	Message  string   `json:"message"`
	Fix      string   `json:"fix,omitempty"`
	// Time is RFC 3339, set when the finding was raised (empty in pure decisions).
	Time string `json:"time,omitempty"`
}

// Code describes one finding code for the reference documentation.
type Code struct {
	Code     string
	Severity Severity
	Meaning  string
}

// Finding codes. Every code the node raises is listed in Codes, from which the
// findings reference in docs/operators.md is generated.
const (
	CodeTier0                = "tier-0"
	CodeBackendUnavailable   = "backend-unavailable"
	CodeServerRefused        = "server-refused"
	CodePluginRefused        = "plugin-refused"
	CodeExemptRunning        = "exempt-unsandboxed"
	CodeExemptionUnmatched   = "exemption-unmatched"
	CodeExemptionCommit      = "exemption-commit-mismatch"
	CodeExemptionPrivate     = "exemption-ignored-private"
	CodeModeOff              = "mode-off"
	CodeModeAutoHostNet      = "mode-auto-host-network"
	CodeMacAutoUnsandboxed   = "macos-auto-unsandboxed"
	CodeNoPluginUsers        = "no-plugin-users"
	CodePluginUserFallback   = "plugin-user-fallback"
	CodeUIDCollision         = "uid-collision"
	CodeGVisorRequired       = "gvisor-required"
	CodeSeatbeltNoLimits     = "seatbelt-no-limits"
	CodeTenantListUnreadable = "tenant-list-unreadable"
	CodeCrashLoop            = "crash-loop"
	CodeLogFlood             = "log-flood"
	CodeToolCollision        = "tool-name-collision"
	CodeManifestInvalid      = "manifest-invalid"
	CodeHookGrant            = "hook-visibility-granted"
	CodeHookGrantUnmatched   = "hook-visibility-unmatched"
	CodeHookTimeoutCapped    = "hook-timeout-capped"
	CodeResourceCollision    = "resource-collision"
	CodePromptCollision      = "prompt-name-collision"
	CodeEgressNameCap        = "egress-name-cap"
	CodeNeedsConfig          = "needs-config"
	CodeRuntimeMissing       = "runtime-missing"
	CodeResultTooLarge       = "result-too-large"
	CodeToolCountLimit       = "tool-count-limit"
	CodeEgressConnCap        = "egress-conn-cap"
	CodeNotificationFlood    = "notification-flood"
	CodeHookAnswerDropped    = "hook-answer-dropped"
	CodeHookApproved         = "hook-authority-granted"
	CodeHookEgress           = "hook-egress-granted"
	CodeHookTrustUnmatched   = "hook-grant-unmatched"
	CodeLandlockTier         = "landlock-tier"
	CodeSecretSentElsewhere  = "secret-sent-elsewhere"
	CodeSecretUnbound        = "secret-unbound"
	CodeSecretPlain          = "secret-handed-plain"
	CodeToolRulesUnreadable  = "tool-rules-unreadable"
	CodeUnresponsive         = "server-unresponsive"
	CodeRecordUnreadable     = "record-unreadable"
	CodeDisk                 = "disk"
	CodeSessionCap           = "session-cap"
	CodeConnectionCap        = "connection-cap"
)

// Codes is the reference of every finding code.
var Codes = []Code{
	{CodeTier0, SevCritical, "No sandbox backend works on this node: every plugin runs as the node's user with no plugin sandbox."},
	{CodeBackendUnavailable, SevError, "A sandbox backend was requested or probed and does not work; with an explicit --backend nothing starts."},
	{CodeServerRefused, SevWarning, "A server was not started (e.g. sandbox: host or own without an exemption); calls of its tools answer with the same reason."},
	{CodePluginRefused, SevError, "A whole plugin was not started (e.g. it requires gVisor, a private candidate on tier 0, a uid collision)."},
	{CodeExemptRunning, SevWarning, "An exempt plugin runs unsandboxed as the node's user."},
	{CodeExemptionUnmatched, SevWarning, "A --plugin-sandbox-exempt names no installed plugin."},
	{CodeExemptionCommit, SevWarning, "A NAME@COMMIT exemption does not match the installed commit, so it exempts nothing."},
	{CodeExemptionPrivate, SevWarning, "An exemption names a private candidate; private candidates are never exempt, so the flag is ignored."},
	{CodeModeOff, SevWarning, "--plugin-sandbox off: plugins (other than private candidates) run unsandboxed as the node's user."},
	{CodeModeAutoHostNet, SevInfo, "--plugin-sandbox auto: sandboxes keep the host network; only the plugin's own code honours the proxy."},
	{CodeMacAutoUnsandboxed, SevWarning, "On macOS, auto mode runs plugins unsandboxed (Seatbelt has no host network to share)."},
	{CodeNoPluginUsers, SevWarning, "A root node runs plugins as its own user: its data folder lies where other users cannot traverse."},
	{CodePluginUserFallback, SevWarning, "A server runs as the node's user because its folders are out of its plugin user's reach."},
	{CodeUIDCollision, SevError, "Two plugin names hash to the same uid; the second plugin is refused, never sharing a user."},
	{CodeGVisorRequired, SevError, "A plugin requires gVisor (manifest isolation or --plugin-backend) and gVisor is not available; it is refused, never downgraded."},
	{CodeSeatbeltNoLimits, SevInfo, "Seatbelt holds no memory, process or CPU limits and no per-plugin user."},
	{CodeTenantListUnreadable, SevCritical, "The tenant's egress list cannot be read or parsed: the proxy denies everything until it is fixed."},
	{CodeCrashLoop, SevError, "A server keeps crashing; it is restarted with back-off. The finding carries its last stderr lines."},
	{CodeLogFlood, SevWarning, "A server writes stderr faster than its log budget; the excess is dropped and counted (status: log_dropped_bytes) and its log is rotated by size."},
	{CodeToolCollision, SevWarning, "Two servers expose the same namespaced tool name; the later one is refused."},
	{CodeManifestInvalid, SevError, "An installed plugin's manifest no longer validates; the plugin is not started."},
	{CodeHookGrant, SevInfo, "--plugin-hooks-see WATCHER=OTHER is in force: WATCHER's hooks see OTHER's tool arguments and results and can block them."},
	{CodeHookGrantUnmatched, SevWarning, "A --plugin-hooks-see names a plugin that is not installed; it covers whatever is installed under that name next."},
	{CodeHookTimeoutCapped, SevInfo, "A hook asks for a timeout above the node's cap; the node stops it at the cap, and a hook out of time does not block."},
	{CodeResourceCollision, SevWarning, "Two servers of one plugin expose the same resource URI; the later one is refused."},
	{CodePromptCollision, SevWarning, "Two servers of one plugin expose the same prompt name; the later one is refused."},
	{CodeEgressNameCap, SevWarning, "A sandbox asked the node's resolver for more distinct allowed names than it may have addresses for; further new names are refused."},
	{CodeNeedsConfig, SevWarning, "A server or hook uses a value the operator has not set (a required userConfig key or a ${VAR}); it does not start until `oz0-node plugin config NAME KEY=VALUE` sets it."},
	{CodeRuntimeMissing, SevWarning, "A local server starts a program (a runtime such as bun, deno, php or docker) that is on no folder of the PATH it runs with; it does not start, rather than crash-looping, until the program is installed (no reinstall)."},
	{CodeResultTooLarge, SevWarning, "A server, local or remote, sent a message (a call's result: a line, a JSON body or an event) over the node's per-message limit; it was not read past the limit, that call was answered with an error and the server's other calls went on."},
	{CodeToolCountLimit, SevWarning, "A server offers more tools than the node's per-server limit; only the first ones are served."},
	{CodeEgressConnCap, SevWarning, "A plugin's sandboxes opened more egress connections at once than the proxy's per-plugin cap; the rest were closed unanswered (status: egress_refused)."},
	{CodeHookAnswerDropped, SevWarning, "A plugin's hook answered with more authority than it holds (allow, updatedInput, a PermissionRequest allow, updatedPermissions… for a tool it does not own); that part of its answer was dropped, the rest (deny, ask, block, stop, context) kept."},
	{CodeHookApproved, SevWarning, "--plugin-hooks-approve NAME is in force: NAME's hooks speak the whole hook protocol for every tool, so they can allow and rewrite the agent's own tool calls."},
	{CodeHookEgress, SevInfo, "--plugin-hooks-egress NAME is in force: NAME's hooks keep the plugin's egress even when they receive the agent's data (prompts, other tools' input and results)."},
	{CodeHookTrustUnmatched, SevWarning, "A --plugin-hooks-approve or --plugin-hooks-egress names a plugin that is not installed; it covers whatever is installed under that name next."},
	{CodeLandlockTier, SevWarning, "bwrap and gVisor cannot run here (user namespaces refused), so sandboxes run on the Landlock tier: files, TCP connects, signals and abstract sockets confined without namespaces; status lists what it does not cover."},
	{CodeSecretSentElsewhere, SevError, "A sandboxed tool sent a secret's sentinel to a host the secret is not bound to (or from another server's sandbox): an attempt to send the secret elsewhere. The request was refused and audited; the real value never left the node."},
	{CodeSecretUnbound, SevWarning, "A secret's manifest binding (extensions.\"ai.oz0\".secrets.KEY.hosts) names no host its server may reach, so the proxy never puts it in."},
	{CodeSecretPlain, SevInfo, "The operator hands a value the node would keep as a secret to the tool as it is (`oz0-node plugin config NAME --plain KEY`): the tool holds the real value."},
	{CodeToolRulesUnreadable, SevCritical, "The tenant's tool rules (<data>/tenant/tools) cannot be read or parsed: every tool call is refused until they are fixed."},
	{CodeUnresponsive, SevError, "A server did not answer the node's liveness check (an MCP ping while it had no call in flight, or after a call ran out of its deadline) within --server-ping-timeout, or never answered initialize; its calls in flight ended with that reason and it is restarted. The finding carries its last stderr lines."},
	{CodeRecordUnreadable, SevError, "A plugin's install record cannot be read (unparsable, empty, too large, or `current` dangles or is no link) or its configuration values cannot; the plugin is held back (status: held), and calls of its tools answer why. Reinstall it (`oz0-node plugin install`) or fix the named file."},
	{CodeDisk, SevError, "The node cannot write a file it keeps current (status.json, health.json, a server's last tool list): the finding names the path and the error, and the node retries until a write succeeds, then clears it."},
	{CodeSessionCap, SevWarning, "MCP sessions reached the node's cap (in total or for one client): the session idle longest was closed to make room (metric oz0_mcp_sessions_evicted_total)."},
	{CodeConnectionCap, SevWarning, "A listener of the node reached its connection cap (in total or for one peer): further connections were closed at once, keeping descriptors in reserve for plugin starts (metric oz0_connections_refused_total)."},
	{CodeNotificationFlood, SevWarning, "A server, local or remote, sends notifications (progress, log, list changed), requests, answers to nothing or lines that are no message faster than the node's per-server rate; the rest are dropped and counted (status: notifications_dropped)."},
}

// LookupCode returns the reference entry of a code.
func LookupCode(code string) (Code, bool) {
	for _, c := range Codes {
		if c.Code == code {
			return c, true
		}
	}
	return Code{}, false
}

// SortFindings orders findings most severe first, then by code and subject, so
// output is stable.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() > b.Severity.Rank()
		}
		if a.Code != b.Code {
			return a.Code < b.Code
		}
		return a.Subject < b.Subject
	})
}
