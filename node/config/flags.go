package config

import (
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// Flags are the raw values of the run flags as a command line gave them, by flag
// name without the dashes, in the order given; "data-dir" carries the global
// --data-dir. Register fills them; Parse validates them into a Run.
type Flags map[string][]string

// runFlag is one run flag, whole: its name and help, and how its raw values
// become part of a Run and how a Run renders back into them. A new flag is one
// entry here (and the Run field it fills).
type runFlag struct {
	name  string
	usage string
	// def is the default help shows for a single-valued flag.
	def string
	// kind is how help names its values: string, stringArray (repeatable) or int.
	kind string
	// parse takes the flag's values (never empty) into r; every error names the
	// flag and the value.
	parse func(r *Run, vals []string) error
	// render is r's canonical values of the flag, in a fixed order; none when it
	// is at its default.
	render func(r Run) []string
}

const (
	single   = "string"
	repeated = "stringArray"
	number   = "int"
	duration = "duration"
)

// runFlags are every flag of `run` (and `service install` and `service unit`),
// in the order Args renders them.
var runFlags = []runFlag{
	{name: "plugin-sandbox", usage: "sandbox mode: strict, auto or off", def: string(policy.Strict), kind: single,
		parse:  func(r *Run, v []string) (err error) { r.Mode, err = policy.ParseMode(last(v)); return },
		render: func(r Run) []string { return []string{string(r.Mode)} }},
	{name: "backend", usage: "sandbox backend: " + strings.Join(Backends, ", "), def: "auto", kind: single,
		parse: func(r *Run, v []string) error {
			if r.Backend = last(v); !slices.Contains(Backends, r.Backend) {
				return fmt.Errorf("--backend %q: must be one of %s", r.Backend, strings.Join(Backends, ", "))
			}
			return nil
		},
		render: func(r Run) []string { return ifSet(r.Backend != "auto", r.Backend) }},
	{name: "plugin-sandbox-exempt", kind: repeated,
		usage:  "exempt a plugin: NAME (whatever is installed under that name) or NAME@COMMIT (one version); repeatable, comma-separated",
		parse:  func(r *Run, v []string) (err error) { r.Exemptions, err = policy.ParseExemptions(v); return },
		render: func(r Run) []string { return each(r.Exemptions, policy.Exemption.String) }},
	{name: "plugin-backend", usage: "raise a plugin to a stronger backend: NAME=gvisor; repeatable", kind: repeated,
		parse: parsePluginBackends,
		render: func(r Run) (out []string) {
			for _, name := range sortedKeys(r.PluginBackends) {
				out = append(out, name+"="+r.PluginBackends[name])
			}
			return out
		}},
	{name: "label", usage: "operator label key=value published in status; repeatable", kind: repeated,
		parse: parseLabels,
		render: func(r Run) (out []string) {
			for _, k := range sortedKeys(r.Labels) {
				out = append(out, k+"="+r.Labels[k])
			}
			return out
		}},
	{name: "egress-allow-cidr", usage: "let the egress proxy reach this range despite the SSRF guard (operator only); repeatable", kind: repeated,
		parse:  parseCIDRs,
		render: func(r Run) []string { return each(r.AllowCIDRs, netip.Prefix.String) }},
	{name: "mcp-listen", usage: "also serve MCP over HTTP on this loopback address (bearer token in the data folder)", kind: single,
		parse: func(r *Run, v []string) (err error) {
			r.MCPListen, err = loopback("--mcp-listen", last(v), "127.0.0.1:7777")
			return
		},
		render: func(r Run) []string { return ifSet(r.MCPListen != "", r.MCPListen) }},
	{name: "metrics-listen", kind: single,
		usage: "also serve Prometheus metrics (GET /metrics) over HTTP on this loopback address, e.g. 127.0.0.1:9464, to a scraper presenting the bearer token in <data>/metrics.token",
		parse: func(r *Run, v []string) (err error) {
			r.MetricsListen, err = loopback("--metrics-listen", last(v), "127.0.0.1:9464")
			return
		},
		render: func(r Run) []string { return ifSet(r.MetricsListen != "", r.MetricsListen) }},
	{name: "plugin-hooks-see", kind: repeated,
		usage:  "let WATCHER's hooks see OTHER's tool calls (arguments and results) and block them: WATCHER=OTHER; repeatable, comma-separated",
		parse:  func(r *Run, v []string) (err error) { r.HookGrants, err = policy.ParseHookGrants(v); return },
		render: func(r Run) []string { return each(r.HookGrants, policy.HookGrant.String) }},
	{name: "plugin-hooks-project", kind: repeated,
		usage:  "let PLUGIN's hooks read the agent session's project (its cwd) read-only; repeatable, comma-separated",
		parse:  func(r *Run, v []string) (err error) { r.HookProject, err = policy.ParseHookProject(v); return },
		render: func(r Run) []string { return r.HookProject }},
	{name: "plugin-hooks-approve", kind: repeated,
		usage:  "let PLUGIN's hooks speak the whole hook protocol for every tool — allow, rewrite input, answer permission requests — not only for its own tools; repeatable, comma-separated",
		parse:  func(r *Run, v []string) (err error) { r.HookApprove, err = policy.ParseHookApprove(v); return },
		render: func(r Run) []string { return r.HookApprove }},
	{name: "plugin-hooks-egress", kind: repeated,
		usage:  "let PLUGIN's hooks keep its egress when they receive the agent's data (prompts, other tools' input and results); repeatable, comma-separated",
		parse:  func(r *Run, v []string) (err error) { r.HookEgress, err = policy.ParseHookEgress(v); return },
		render: func(r Run) []string { return r.HookEgress }},
	{name: "plugin-ro-path", kind: repeated,
		usage: "show PLUGIN's sandboxes a host path read-only at its own path, e.g. a browser a server drives: NAME=/opt/google/chrome; repeatable",
		parse: parseROPaths,
		render: func(r Run) (out []string) {
			for _, name := range slices.Sorted(maps.Keys(r.ROPaths)) {
				for _, p := range r.ROPaths[name] {
					out = append(out, name+"="+p)
				}
			}
			return out
		}},
	{name: "plugin-tls-trustd", kind: repeated,
		usage:  "macOS: let this plugin's sandboxes reach the certificate trust daemon, which TLS through Security.framework needs (Go, Rust native-tls) and which reaches the network outside the proxy; repeatable",
		parse:  parseTrustD,
		render: func(r Run) []string { return r.TrustD }},
	{name: "server-notify-rate", kind: number, def: "0",
		usage: "notifications a second each MCP server may send before the rest are dropped and counted; 0 is the default, 200",
		parse: func(r *Run, v []string) error {
			n, err := strconv.Atoi(last(v))
			if err != nil || n < 0 || n > MaxNotifyRate {
				return fmt.Errorf("--server-notify-rate %s: must be 0 (the node's default) or a number of notifications a second from 1 to %d", last(v), MaxNotifyRate)
			}
			r.NotifyRate = n
			return nil
		},
		render: func(r Run) []string { return ifSet(r.NotifyRate != 0, strconv.Itoa(r.NotifyRate)) }},
	{name: "approval-wait", kind: single, def: "0s",
		usage: "let a connection to a host the manifest names and the tenant list does not, or a call the tenant's tool rules refuse, wait this long for an operator's answer (oz0-node approvals, the TUI), e.g. 30s; 0 refuses at once",
		parse: func(r *Run, v []string) error {
			d, err := time.ParseDuration(last(v))
			if err != nil || d < 0 || d > MaxApprovalWait {
				return fmt.Errorf("--approval-wait %s: must be a duration from 0s to %v, e.g. 30s", last(v), MaxApprovalWait)
			}
			r.ApprovalWait = d
			return nil
		},
		render: func(r Run) []string { return ifSet(r.ApprovalWait != 0, r.ApprovalWait.String()) }},
	{name: "otlp-endpoint", kind: single,
		usage: "export traces of tool calls, hook runs and egress connections over OTLP to this URL (http://host:4318 for OTLP/HTTP; with OTEL_EXPORTER_OTLP_PROTOCOL=grpc, http://host:4317); the standard OTEL_EXPORTER_OTLP_* variables apply too",
		parse: func(r *Run, v []string) (err error) {
			r.OTLPEndpoint, err = parseOTLPEndpoint(last(v))
			return
		},
		render: func(r Run) []string { return ifSet(r.OTLPEndpoint != "", r.OTLPEndpoint) }},
	{name: "call-timeout", kind: duration, def: "0",
		usage: "how long the node waits for a server's answer to one tool call before it ends the call with an error naming the server (and checks the server is alive); 0 is the default, " + DefaultCallTimeout.String(),
		parse: func(r *Run, v []string) (err error) {
			r.CallTimeout, err = boundedDuration("--call-timeout", last(v), time.Second, MaxCallTimeout)
			return
		},
		render: func(r Run) []string { return ifSet(r.CallTimeout != 0, r.CallTimeout.String()) }},
	{name: "server-ping-every", kind: duration, def: "0",
		usage: "how often the node pings a running server with no call in flight (MCP ping) to tell it is alive; 0 is the default, " + DefaultPingEvery.String(),
		parse: func(r *Run, v []string) (err error) {
			r.PingEvery, err = boundedDuration("--server-ping-every", last(v), time.Second, time.Hour)
			return
		},
		render: func(r Run) []string { return ifSet(r.PingEvery != 0, r.PingEvery.String()) }},
	{name: "server-ping-timeout", kind: duration, def: "0",
		usage: "how long a server has to answer the node's ping before it is reported unresponsive and restarted; 0 is the default, " + DefaultPingTimeout.String(),
		parse: func(r *Run, v []string) (err error) {
			r.PingTimeout, err = boundedDuration("--server-ping-timeout", last(v), 100*time.Millisecond, 10*time.Minute)
			return
		},
		render: func(r Run) []string { return ifSet(r.PingTimeout != 0, r.PingTimeout.String()) }},
	{name: "mcp-session-cap", kind: number, def: "0",
		usage: "MCP sessions the node keeps open at once; past it the session idle longest is closed; 0 is the default, " + strconv.Itoa(DefaultSessionCap),
		parse: func(r *Run, v []string) (err error) {
			r.SessionCap, err = boundedInt("--mcp-session-cap", last(v), 1, MaxSessionCap)
			return
		},
		render: func(r Run) []string { return ifSet(r.SessionCap != 0, strconv.Itoa(r.SessionCap)) }},
	{name: "mcp-session-cap-per-client", kind: number, def: "0",
		usage: "MCP sessions one client (one process on the node's sockets, one address on --mcp-listen) keeps open at once; past it its own session idle longest is closed; 0 is the default, " + strconv.Itoa(DefaultSessionCapPerClient),
		parse: func(r *Run, v []string) (err error) {
			r.SessionCapPerClient, err = boundedInt("--mcp-session-cap-per-client", last(v), 1, MaxSessionCap)
			return
		},
		render: func(r Run) []string { return ifSet(r.SessionCapPerClient != 0, strconv.Itoa(r.SessionCapPerClient)) }},
}

// MaxApprovalWait bounds --approval-wait: a caller (an agent, a plugin's
// connection) does not wait longer than that for anyone.
const MaxApprovalWait = 10 * time.Minute

// parseOTLPEndpoint takes an http(s) URL with a host and no credentials: the
// flag is rendered into a service unit and status, so a secret (a token) goes in
// OTEL_EXPORTER_OTLP_HEADERS instead.
func parseOTLPEndpoint(v string) (string, error) {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("--otlp-endpoint %q: %w", v, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("--otlp-endpoint %q: must be an http:// or https:// URL, e.g. http://127.0.0.1:4318", v)
	case u.Host == "":
		return "", fmt.Errorf("--otlp-endpoint %q: names no host", v)
	case u.User != nil:
		return "", fmt.Errorf("--otlp-endpoint %q: credentials do not belong in the URL (it is shown in status and the service unit); set OTEL_EXPORTER_OTLP_HEADERS in the node's environment instead", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("--otlp-endpoint %q: a query or fragment is not part of an OTLP endpoint", v)
	}
	return u.String(), nil
}

// boundedDuration parses a flag's duration: 0 (the default) or from lo to hi.
func boundedDuration(flag, v string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d != 0 && (d < lo || d > hi) {
		return 0, fmt.Errorf("%s %s: must be 0 (the node's default) or a duration from %s to %s, e.g. 30s", flag, v, lo, hi)
	}
	return d, nil
}

// boundedInt parses a flag's number: 0 (the default) or from lo to hi.
func boundedInt(flag, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n != 0 && (n < lo || n > hi) {
		return 0, fmt.Errorf("%s %s: must be 0 (the node's default) or a number from %d to %d", flag, v, lo, hi)
	}
	return n, nil
}

// Register registers every run flag on fs; the values given go into f.
func Register(fs *pflag.FlagSet, f Flags) {
	for _, rf := range runFlags {
		fs.Var(&flagValue{f: f, flag: rf}, rf.name, rf.usage)
	}
}

// RegisterSome registers on fs the run flags named in usage, each with the help
// given there (a command that decides or builds as a node would, for a few of the
// node's flags); their values go into f and Parse validates them as for `run`.
func RegisterSome(fs *pflag.FlagSet, f Flags, usage map[string]string) {
	for _, rf := range runFlags {
		if u, ok := usage[rf.name]; ok {
			fs.Var(&flagValue{f: f, flag: rf}, rf.name, u)
		}
	}
}

// Names are the run flags' names, in Args' order.
func Names() []string { return each(runFlags, func(f runFlag) string { return f.name }) }

// flagValue collects one flag's values as given; Parse validates them.
type flagValue struct {
	f    Flags
	flag runFlag
}

func (v *flagValue) Set(s string) error {
	if v.flag.kind == repeated {
		v.f[v.flag.name] = append(v.f[v.flag.name], s)
	} else {
		v.f[v.flag.name] = []string{s}
	}
	return nil
}

func (v *flagValue) String() string {
	vals, ok := v.f[v.flag.name]
	switch {
	case v.flag.kind == repeated:
		return strings.Join(vals, ",")
	case ok:
		return last(vals)
	}
	return v.flag.def
}

func (v *flagValue) Type() string { return v.flag.kind }

// Parse validates flag values into a Run. Every error names the flag and the
// value.
func Parse(f Flags) (Run, error) {
	r := Run{DataDir: last(f["data-dir"]), Mode: policy.Strict, Backend: "auto", Labels: map[string]string{}, PluginBackends: map[string]string{}}
	if strings.ContainsAny(r.DataDir, "\x00\n\r") {
		return Run{}, fmt.Errorf("--data-dir %q: contains a control character", r.DataDir)
	}
	for name := range f {
		if name != "data-dir" && !slices.Contains(Names(), name) {
			return Run{}, fmt.Errorf("--%s: not a run flag", name)
		}
	}
	for _, rf := range runFlags {
		if vals := f[rf.name]; len(vals) > 0 && (rf.kind == repeated || vals[0] != "") {
			if err := rf.parse(&r, vals); err != nil {
				return Run{}, err
			}
		}
	}
	return r, nil
}

// Args renders the configuration as the canonical `run` flags, in a fixed order,
// for a service unit or plist. The data folder is included when set.
func (r Run) Args() []string {
	var a []string
	if r.DataDir != "" {
		a = append(a, "--data-dir", r.DataDir)
	}
	for _, rf := range runFlags {
		for _, v := range rf.render(r) {
			a = append(a, "--"+rf.name, v)
		}
	}
	return a
}

func last(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func ifSet(set bool, v string) []string {
	if !set {
		return nil
	}
	return []string{v}
}

func each[T any](xs []T, f func(T) string) []string {
	var out []string
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func loopback(flag, v, example string) (string, error) {
	ap, err := netip.ParseAddrPort(v)
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		return "", fmt.Errorf("%s %q: must be a loopback address with a port, e.g. %s", flag, v, example)
	}
	return ap.String(), nil
}

func parsePluginBackends(r *Run, vals []string) error {
	for _, v := range vals {
		for _, item := range strings.Split(v, ",") {
			name, be, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || !manifest.ValidName(name) {
				return fmt.Errorf("--plugin-backend %q: must be NAME=gvisor with a kebab-case plugin name", v)
			}
			if be != policy.BackendGVisor {
				return fmt.Errorf("--plugin-backend %q: the only stronger backend a plugin can be raised to is gvisor", v)
			}
			r.PluginBackends[name] = be
		}
	}
	return nil
}

func parseLabels(r *Run, vals []string) error {
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		switch {
		case !ok:
			return fmt.Errorf("--label %q: must be key=value", v)
		case !labelKeyRE().MatchString(k):
			return fmt.Errorf("--label %q: key must be [prefix/]name of letters, digits, '.', '_' or '-' (name at most 63)", v)
		case strings.HasPrefix(k, DerivedPrefix):
			return fmt.Errorf("--label %q: the %s prefix is reserved for labels the node derives", v, DerivedPrefix)
		case !labelValRE().MatchString(val):
			return fmt.Errorf("--label %q: value must be at most 63 letters, digits, '.', '_' or '-'", v)
		}
		if old, dup := r.Labels[k]; dup && old != val {
			return fmt.Errorf("--label %q: key %s given twice with different values", v, k)
		}
		r.Labels[k] = val
	}
	return nil
}

func parseCIDRs(r *Run, vals []string) error {
	for _, v := range vals {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("--egress-allow-cidr %q: %w", v, err)
		}
		if p.Masked() != p {
			return fmt.Errorf("--egress-allow-cidr %q: has host bits set; did you mean %s?", v, p.Masked())
		}
		r.AllowCIDRs = append(r.AllowCIDRs, p)
	}
	return nil
}

func parseTrustD(r *Run, vals []string) error {
	for _, v := range vals {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); !manifest.ValidName(name) {
				return fmt.Errorf("--plugin-tls-trustd %q: must be a kebab-case plugin name", v)
			}
			if !slices.Contains(r.TrustD, name) {
				r.TrustD = append(r.TrustD, name)
			}
		}
	}
	sort.Strings(r.TrustD)
	return nil
}

// parseROPaths takes NAME=PATH values: an absolute, clean host path (a plain
// folder or file name at every step is the backend's to check at start), never
// the whole filesystem, a kernel folder, or anything holding or inside the
// node's data folder.
func parseROPaths(r *Run, vals []string) error {
	for _, v := range vals {
		name, p, ok := strings.Cut(v, "=")
		switch {
		case !ok || !manifest.ValidName(name):
			return fmt.Errorf("--plugin-ro-path %q: must be NAME=PATH with a kebab-case plugin name", v)
		case !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsAny(p, "\x00\n\r"):
			return fmt.Errorf("--plugin-ro-path %q: the path must be absolute and clean", v)
		case p == "/" || within(p, "/proc") || within(p, "/sys") || within(p, "/dev"):
			return fmt.Errorf("--plugin-ro-path %q: %s is the whole filesystem or a kernel folder", v, p)
		case r.DataDir != "" && (within(p, r.DataDir) || within(r.DataDir, p)):
			return fmt.Errorf("--plugin-ro-path %q: %s holds or lies in the node's data folder", v, p)
		}
		if r.ROPaths == nil {
			r.ROPaths = map[string][]string{}
		}
		if !slices.Contains(r.ROPaths[name], p) {
			r.ROPaths[name] = append(r.ROPaths[name], p)
			slices.Sort(r.ROPaths[name])
		}
	}
	return nil
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
