// Command benchtable turns `go test -bench` output into the side-by-side table that
// `make bench` prints: each group has a baseline measured in the same run, and each
// row shows its median, p90 and ratio to that baseline. It also writes the parsed
// results as JSON, and compares two such JSON files (-compare old.json new.json).
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Result is one benchmark's metrics by unit (ns/op, MB/s, p50-µs, …).
type Result map[string]float64

// row says which benchmark and metric a table line shows.
type row struct {
	label, bench, metric, p90 string
}

type group struct {
	title  string
	unit   string
	better string // "lower" or "higher"
	rows   []row  // the base row is the baseline
	base   int    // index of the baseline row
	target string
	extra  []extra // more metrics shown per row
	// paired is the metric holding a row's median ratio to the baseline run
	// in the same cycles (pairedMetric when empty).
	paired string
}

// extra is a metric shown in a column of its own, as measured.
type extra struct{ head, metric string }

var groups = []group{
	{title: "Sandbox start (/bin/true)", unit: "ms", better: "lower", base: 1, target: "node bwrap ≤ 2× raw bwrap; gVisor < 250 ms", rows: []row{
		{"bare /bin/true", "SandboxStart/bare", "p50-µs", "p90-µs"},
		{"raw bwrap --unshare-all", "SandboxStart/raw-bwrap", "p50-µs", "p90-µs"},
		{"node bwrap", "SandboxStart/node-bwrap", "p50-µs", "p90-µs"},
		{"node gVisor", "SandboxStart/node-gvisor", "p50-µs", "p90-µs"},
		{"node Landlock", "SandboxStart/node-landlock", "p50-µs", "p90-µs"},
	}},
	{title: "exec as a user runs it (whole process, /bin/true; * = median of ratios to raw bwrap run just before each)", unit: "ms", better: "lower", target: "exec bwrap ≤ 2× raw bwrap; exec landlock the fastest backend", rows: []row{
		{"raw bwrap --unshare-all", "ExecStart/raw-bwrap", "p50-µs", "p90-µs"},
		{"oz0-node exec --backend bwrap", "ExecStart/exec-bwrap", "p50-µs", "p90-µs"},
		{"oz0-node exec --backend landlock", "ExecStart/exec-landlock", "p50-µs", "p90-µs"},
		{"floor: the node binary starting (oz0-node version)", "ExecStart/node-binary", "p50-µs", "p90-µs"},
		{"floor: the node's in-process bwrap start + teardown", "ExecStart/node-bwrap-teardown", "p50-µs", "p90-µs"},
	}},
	{title: "exec --backend gvisor (whole process; * = median of ratios to an in-node start just before each)", unit: "ms", better: "lower", target: "exec gVisor ≤ 1.3× the in-node gVisor start", rows: []row{
		{"the node's in-process gVisor start", "ExecStart/node-gvisor", "p50-µs", "p90-µs"},
		{"oz0-node exec --backend gvisor", "ExecStart/exec-gvisor", "p50-µs", "p90-µs"},
		{"floor: exec's sandbox (egress bridge inside) in-process + teardown", "ExecStart/node-gvisor-bridge-teardown", "p50-µs", "p90-µs"},
	}},
	{title: "Tool call latency (fixture server under bwrap)", unit: "µs", better: "lower", target: "gateway adds < 300 µs (median)", rows: []row{
		{"direct go-sdk client", "ToolCall/direct", "p50-µs", "p90-µs"},
		{"through the gateway", "ToolCall/gateway", "p50-µs", "p90-µs"},
	}},
	{title: "Tool calls/s, 8 callers (* = median of ratios to a direct burst just before each)", unit: "calls/s", better: "higher", target: "gateway ≥ 50 % of direct", rows: []row{
		{"direct go-sdk client", "ToolCall/direct-8", "calls/s", ""},
		{"through the gateway", "ToolCall/gateway-8", "calls/s", ""},
		{"go-sdk server answering itself (ceiling)", "ToolCall/ceiling-8", "calls/s", ""},
	}},
	{title: "Tool call with traces on: a span per call over OTLP/HTTP to an endpoint on loopback (both nodes write the audit stream)", unit: "µs", better: "lower",
		target: "traces add < 50 µs a call (median)", rows: []row{
			{"through the gateway, audit stream only", "TracedCall/audit", "p50-µs", "p90-µs"},
			{"through the gateway, audit stream and traces", "TracedCall/audit+traces", "p50-µs", "p90-µs"},
			{"the node's work for one span (made and batched; mean)", "TracedCall/span", "ns/op", ""},
		}},
	{title: "Tool calls/s with traces on, 8 callers (* = median of ratios to the untraced node's burst just before each)", unit: "calls/s", better: "higher",
		target: "traced ≥ 90 % of untraced", rows: []row{
			{"through the gateway, audit stream only (the pairs' baseline)", "TracedCall/traced-8", "base-calls/s", ""},
			{"through the gateway, audit stream and traces", "TracedCall/traced-8", "calls/s", ""},
		}},
	{title: "Both doors as clients use them: echo tool, Python backend (bwrap), 8 callers each on its own session (stdio: its own oz0-node mcp); * = median of 15 cycles' ratios to TBXark in the same cycle", unit: "calls/s", better: "higher", base: 2, paired: "x-paired-tbxark",
		target: "both doors ≥ TBXark's calls/s and ≤ its CPU/call; stdio ≥ 0.45 of direct; node RSS ≤ 25 MB", extra: clientCols, rows: clientRows("py")},
	{title: "Both doors as clients use them: echo tool, Go (go-sdk) backend (bwrap), 8 callers each on its own session (* as above)", unit: "calls/s", better: "higher", base: 2, paired: "x-paired-tbxark",
		target: "both doors ≥ TBXark's calls/s and ≤ its CPU/call", extra: clientCols, rows: clientRows("go")},
	{title: "The gateway against its peers: echo tool, Python backend, 8 callers on one shared session (* = median of 15 paired bursts' ratios to direct)", unit: "calls/s", better: "higher",
		target: "both doors ≥ 0.35 of direct, node CPU ≤ 60 µs/call, p50 ≤ 200 µs", extra: peerCols, rows: peerRows("py")},
	{title: "The gateway against its peers: echo tool, Go (go-sdk) backend, 8 callers on one shared session (* as above)", unit: "calls/s", better: "higher",
		target: "both doors ≥ 0.5 of direct", extra: peerCols, rows: peerRows("go")},
	{title: "Tool call with one PreToolUse hook (Python, bwrap), through the gateway", unit: "ms", better: "lower", target: "hook path's own overhead < 5 ms (median)", rows: []row{
		{"call to a plugin without hooks", "HookCall/plain", "p50-µs", "p90-µs"},
		{"call with the hook in front", "HookCall/pre-hook", "p50-µs", "p90-µs"},
		{"the hook's sandboxed process alone", "HookCall/hook-process", "p50-µs", "p90-µs"},
		{"hook path's own work (plan, spec, sandbox set-up/teardown)", "HookCall/hook-path", "p50-µs", "p90-µs"},
		{"hooked − plain − process, per triple (noisy)", "HookCall/hook-overhead", "p50-µs", "p90-µs"},
	}},
	{title: "A hook event as Claude Code meets it: oz0-node hook beside a running node (bwrap), whole process, one shell hook", unit: "ms", better: "lower", base: 4,
		target: "what the node adds to a handled event ≤ 10 ms (median)", rows: []row{
			{"the event, from the hook command's start to its answer", "HookEvent/whole", "p50-µs", "p90-µs"},
			{"the hook's own run (its sandbox and process, as the node times it)", "HookEvent/hook-run", "p50-µs", "p90-µs"},
			{"what the node adds: the event − the hook's run, per event", "HookEvent/overhead", "p50-µs", "p90-µs"},
			{"an event no plugin handles (setup no longer registers it: 0)", "HookEvent/unhandled", "p50-µs", "p90-µs"},
			{"floor: the node binary starting (oz0-node version)", "HookEvent/node-binary", "p50-µs", "p90-µs"},
		}},
	{title: "Proxy throughput in-process (1 GB over loopback; the proxy alone, no sandbox)", unit: "MB/s", better: "higher", rows: []row{
		{"direct", "ThroughputDirect", "MB/s", ""},
		{"CONNECT via a relaying bridge + unix socket (gVisor)", "ThroughputCONNECTBridgeUnix", "MB/s", ""},
		{"CONNECT via unix socket", "ThroughputCONNECTUnix", "MB/s", ""},
		{"CONNECT via loopback TCP", "ThroughputCONNECTTCP", "MB/s", ""},
		{"absolute-form HTTP", "ThroughputHTTPForward", "MB/s", ""},
	}},
	{title: "Egress from inside a bwrap or gVisor sandbox (curl, 1 GB, loopback server; * = median of ratios to a direct run just before each)", unit: "MB/s", better: "higher", target: "≥ 70 % of direct", rows: []row{
		{"curl on the host, direct", "EgressFromSandbox/direct", "curl-MB/s", ""},
		{"curl on the host via a bare splice relay (ceiling)", "EgressFromSandbox/host-relay", "curl-MB/s", ""},
		{"CONNECT via the listener the bridge hands off (non-root, exec)", "EgressFromSandbox/sandbox-connect", "curl-MB/s", ""},
		{"absolute-form HTTP via the handed-off listener", "EgressFromSandbox/sandbox-http", "curl-MB/s", ""},
		{"CONNECT via a listener in the sandbox's netns (run's path)", "EgressFromSandbox/sandbox-connect-netns", "curl-MB/s", ""},
		{"absolute-form HTTP via the netns listener", "EgressFromSandbox/sandbox-http-netns", "curl-MB/s", ""},
		{"transparent (no proxy support; the node's resolver and listener)", "EgressFromSandbox/sandbox-transparent", "curl-MB/s", ""},
		{"gVisor: CONNECT via the relaying bridge", "EgressFromSandbox/gvisor-connect", "curl-MB/s", ""},
		{"gVisor: transparent (the bridge is the gate; the node decides)", "EgressFromSandbox/gvisor-transparent", "curl-MB/s", ""},
	}},
	{title: "New connection (connect + CONNECT + first byte)", unit: "µs", better: "lower", target: "adds < 1 ms (median)", rows: []row{
		{"direct", "LatencyDirect", "p50-µs", "p99-µs"},
		{"CONNECT via unix socket", "LatencyCONNECTUnix", "p50-µs", "p99-µs"},
		{"CONNECT via a relaying bridge (gVisor)", "LatencyCONNECTBridgeUnix", "p50-µs", "p99-µs"},
	}},
	{title: "Secrets: HTTPS intercepted to put a secret in, against the plain tunnel other hosts get (100 MB over loopback; the proxy alone)", unit: "MB/s", better: "higher", rows: []row{
		{"plain CONNECT tunnel (no secret bound to the host)", "ThroughputTLSTunnel", "MB/s", ""},
		{"intercepted, HTTP/1.1, no sentinel in the request", "ThroughputTLSIntercepted", "MB/s", ""},
		{"intercepted, HTTP/1.1, secret put in (answer scanned)", "ThroughputTLSInterceptedSecret", "MB/s", ""},
		{"intercepted, h2 both sides, secret put in", "ThroughputTLSInterceptedH2", "MB/s", ""},
	}},
	{title: "Secrets: a new HTTPS connection (connect + CONNECT + TLS handshake + first response)", unit: "µs", better: "lower", rows: []row{
		{"plain tunnel", "LatencyTLSTunnel", "p50-µs", "p99-µs"},
		{"intercepted (node CA leaf + handshake to host)", "LatencyTLSIntercepted", "p50-µs", "p99-µs"},
	}},
	{title: "Policy", unit: "µs", better: "lower", rows: []row{
		{"policy.Decide", "PolicyDecide", "ns/op", ""},
		{"per-call check (commit + decision)", "CheckBeforeCall", "ns/op", ""},
	}},
	{title: "Tenant list change → enforcement", unit: "ms", better: "lower", target: "≤ 100 ms", rows: []row{
		{"rename write to refusal", "TenantListReload", "p50-µs", "p90-µs"},
	}},
	{title: "Node memory (RSS of the node itself)", unit: "MB", better: "lower", target: "< 80 MB with 50 servers or 10,000 tools offered; < 200 MB with 5,000 idle sessions; sessions held ≤ the cap (1000); descriptors held under a flood ≤ half the limit", extra: memCols, rows: []row{
		{"10 sandboxed servers", "NodeRSS10", "node-RSS-MB", ""},
		{"50 sandboxed servers", "NodeRSS50", "node-RSS-MB", ""},
		{"one server offering 10,000 tools (2000 served)", "NodeRSSTools10000", "node-RSS-MB", ""},
		{"5,000 MCP sessions opened and abandoned", "NodeRSSSessions5000", "node-RSS-MB", ""},
		{"19,000 connections to --mcp-listen held by one user", "NodeRSSConnections20000", "node-RSS-MB", ""},
	}},
}

// memCols are what the node holds under a careless caller: sessions still open,
// descriptors (and the node's limit).
var memCols = []extra{{"sessions open", "sessions-open"}, {"descriptors", "node-fds"}, {"fd limit", "fd-limit"}}

var peerCols = []extra{{"p50 µs", "p50-µs"}, {"CPU µs/call", "cpu-µs/call"}, {"RSS MB", "RSS-MB"}}

var clientCols = []extra{{"× direct", "x-paired-direct"}, {"p50 µs", "p50-µs"}, {"p99 µs", "p99-µs"}, {"1 caller +p50", "alone-added-p50-µs"}, {"CPU µs/call", "cpu-µs/call"},
	{"node CPU µs/call", "node-cpu-µs/call"},
	{"node RSS MB", "node-RSS-MB"}, {"node RSS idle, 0/8 stdio sessions", "node-RSS-0-sessions-MB"}, {"", "node-RSS-8-sessions-MB"}, {"RSS MB", "RSS-MB"}}

// clientRows are the rows of one backend's client-shaped group.
func clientRows(be string) []row {
	return []row{
		{"oz0-node over --mcp-listen (CPU, RSS: the node)", "GatewayClients/" + be + "-clients-listen", "calls/s", ""},
		{"oz0-node through 8 oz0-node mcp (CPU, RSS: node + bridges)", "GatewayClients/" + be + "-clients-bridge", "calls/s", ""},
		{"TBXark/mcp-proxy v0.43.2, 8 sessions", "GatewayClients/" + be + "-clients-tbxark", "calls/s", ""},
	}
}

// peerRows are the rows of one backend's gateway-versus-peers group.
func peerRows(be string) []row {
	rows := []row{
		{"direct go-sdk client (stdio)", "GatewayPeers/" + be + "-direct", "calls/s", ""},
		{"oz0-node over --mcp-listen (CPU, RSS: the node)", "GatewayPeers/" + be + "-listen", "calls/s", ""},
		{"oz0-node through oz0-node mcp (CPU, RSS: node + bridge)", "GatewayPeers/" + be + "-bridge", "calls/s", ""},
		{"TBXark/mcp-proxy v0.43.2 (Go)", "GatewayPeers/" + be + "-tbxark", "calls/s", ""},
		{"punkpeye mcp-proxy (Node.js)", "GatewayPeers/" + be + "-punkpeye", "calls/s", ""},
		{"supergateway --stateful (Node.js)", "GatewayPeers/" + be + "-supergateway", "calls/s", ""},
	}
	if be == "py" {
		rows = append(rows,
			row{"ceiling: oz0-node mcp relaying straight to the backend", "GatewayPeers/py-ceiling-relay", "calls/s", ""},
			row{"ceiling: go-sdk server answering itself behind oz0-node mcp", "GatewayPeers/py-ceiling-sdk-stdio", "calls/s", ""},
			row{"ceiling: go-sdk server answering itself, HTTP (CPU: +callers)", "GatewayPeers/py-ceiling-sdk-http", "calls/s", ""})
	}
	return rows
}

var lineRE = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) map[string]Result {
	out := map[string]Result{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		res := Result{}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				res[f[i+1]] = v
			}
		}
		out[m[1]] = res
	}
	return out
}

// value converts a metric into the group's unit.
func value(res Result, metric, unit string) (float64, bool) {
	v, ok := res[metric]
	if !ok {
		return 0, false
	}
	from := metric
	switch {
	case strings.HasSuffix(from, "-µs"):
		from = "µs"
	case from == "ns/op":
		from = "ns"
	}
	scale := map[string]float64{"ns": 1e-3, "µs": 1, "ms": 1e3}
	if s, ok := scale[from]; ok {
		if t, ok := scale[unit]; ok {
			return v * s / t, true
		}
	}
	return v, true
}

func fmtNum(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// pairedMetric is a row's median ratio to baseline runs made in pairs with its
// own; when a row has it, it is shown (marked *) instead of the ratio of medians.
const pairedMetric = "x-paired-direct"

func table(w io.Writer, res map[string]Result) {
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s  [%s, %s is better]", g.title, g.unit, g.better)
		if g.target != "" {
			fmt.Fprintf(w, "  target: %s", g.target)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  %-64s %12s %12s %10s", "", "median", "p90", "× base")
		for _, x := range g.extra {
			fmt.Fprintf(w, " %12s", x.head)
		}
		fmt.Fprintln(w)
		base, _ := value(res[g.rows[g.base].bench], g.rows[g.base].metric, g.unit)
		for i, r := range g.rows {
			v, ok := value(res[r.bench], r.metric, g.unit)
			if !ok {
				fmt.Fprintf(w, "  %-64s %12s\n", r.label, "not measured")
				continue
			}
			p90 := "-"
			if r.p90 != "" {
				if pv, ok := value(res[r.bench], r.p90, g.unit); ok {
					p90 = fmtNum(pv)
				}
			}
			ratio := "baseline"
			if pr, ok := res[r.bench][cmp.Or(g.paired, pairedMetric)]; ok && i != g.base {
				ratio = fmt.Sprintf("%.2f*", pr) // measured in pairs with the baseline
			} else if i != g.base && base > 0 {
				ratio = fmt.Sprintf("%.2f", v/base)
			}
			fmt.Fprintf(w, "  %-64s %12s %12s %10s", r.label, fmtNum(v), p90, ratio)
			for _, x := range g.extra {
				xv := "-"
				if v, ok := res[r.bench][x.metric]; ok {
					xv = fmtNum(v)
				}
				fmt.Fprintf(w, " %12s", xv)
			}
			fmt.Fprintln(w)
		}
	}
}

func compare(w io.Writer, old, cur map[string]Result) {
	names := make([]string, 0, len(cur))
	for n := range cur {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%-44s %-12s %12s %12s %8s\n", "benchmark", "metric", "old", "new", "delta")
	for _, n := range names {
		metrics := make([]string, 0, len(cur[n]))
		for m := range cur[n] {
			metrics = append(metrics, m)
		}
		sort.Strings(metrics)
		for _, m := range metrics {
			o, ok := old[n][m]
			if !ok || o == 0 {
				continue
			}
			c := cur[n][m]
			fmt.Fprintf(w, "%-44s %-12s %12s %12s %+7.1f%%\n", n, m, fmtNum(o), fmtNum(c), (c-o)/o*100)
		}
	}
}

func readJSON(path string) (map[string]Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out map[string]Result
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func main() {
	jsonOut := flag.String("json", "", "also write the parsed results to this file")
	cmp := flag.Bool("compare", false, "compare two JSON files: benchtable -compare OLD NEW")
	flag.Parse()
	if *cmp {
		if flag.NArg() != 2 {
			fmt.Fprintln(os.Stderr, "usage: benchtable -compare OLD.json NEW.json")
			os.Exit(2)
		}
		old, err := readJSON(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		cur, err := readJSON(flag.Arg(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		compare(os.Stdout, old, cur)
		return
	}
	res := parse(os.Stdin)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
	}
	table(os.Stdout, res)
}
