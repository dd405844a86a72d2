// Package config validates the flags that shape a running node (`oz0-node run`) and
// renders them back as a canonical command line, so `service install` writes into a
// unit exactly what `run` would accept.
package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
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
	// TrustD are the plugins granted macOS's certificate trust daemon, sorted.
	TrustD []string `json:"tls_trustd,omitempty"`
	// NotifyRate is how many notifications a second each server may send before
	// the rest are dropped (0: the node's default).
	NotifyRate int `json:"server_notify_rate,omitempty"`
}

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

// Flags are the raw flag values as a CLI parses them.
type Flags struct {
	DataDir        string
	Mode           string
	Exempt         []string
	Backend        string
	PluginBackends []string
	Labels         []string
	AllowCIDRs     []string
	MCPListen      string
	MetricsListen  string
	HooksSee       []string
	HooksProject   []string
	TrustD         []string
	NotifyRate     int
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

// Parse validates flag values. Every error names the flag and the value.
func Parse(f Flags) (Run, error) {
	r := Run{DataDir: f.DataDir, Backend: f.Backend, Labels: map[string]string{}, PluginBackends: map[string]string{}}
	if strings.ContainsAny(f.DataDir, "\x00\n\r") {
		return Run{}, fmt.Errorf("--data-dir %q: contains a control character", f.DataDir)
	}
	if f.Mode == "" {
		f.Mode = string(policy.Strict)
	}
	mode, err := policy.ParseMode(f.Mode)
	if err != nil {
		return Run{}, err
	}
	r.Mode = mode
	if r.Backend == "" {
		r.Backend = "auto"
	}
	if !slices.Contains(Backends, r.Backend) {
		return Run{}, fmt.Errorf("--backend %q: must be one of %s", r.Backend, strings.Join(Backends, ", "))
	}
	if r.Exemptions, err = policy.ParseExemptions(f.Exempt); err != nil {
		return Run{}, err
	}
	for _, v := range f.PluginBackends {
		for _, item := range strings.Split(v, ",") {
			name, be, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || !manifest.ValidName(name) {
				return Run{}, fmt.Errorf("--plugin-backend %q: must be NAME=gvisor with a kebab-case plugin name", v)
			}
			if be != policy.BackendGVisor {
				return Run{}, fmt.Errorf("--plugin-backend %q: the only stronger backend a plugin can be raised to is gvisor", v)
			}
			r.PluginBackends[name] = be
		}
	}
	for _, v := range f.Labels {
		k, val, ok := strings.Cut(v, "=")
		switch {
		case !ok:
			return Run{}, fmt.Errorf("--label %q: must be key=value", v)
		case !labelKeyRE().MatchString(k):
			return Run{}, fmt.Errorf("--label %q: key must be [prefix/]name of letters, digits, '.', '_' or '-' (name at most 63)", v)
		case strings.HasPrefix(k, DerivedPrefix):
			return Run{}, fmt.Errorf("--label %q: the %s prefix is reserved for labels the node derives", v, DerivedPrefix)
		case !labelValRE().MatchString(val):
			return Run{}, fmt.Errorf("--label %q: value must be at most 63 letters, digits, '.', '_' or '-'", v)
		}
		if old, dup := r.Labels[k]; dup && old != val {
			return Run{}, fmt.Errorf("--label %q: key %s given twice with different values", v, k)
		}
		r.Labels[k] = val
	}
	for _, v := range f.AllowCIDRs {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return Run{}, fmt.Errorf("--egress-allow-cidr %q: %w", v, err)
		}
		if p.Masked() != p {
			return Run{}, fmt.Errorf("--egress-allow-cidr %q: has host bits set; did you mean %s?", v, p.Masked())
		}
		r.AllowCIDRs = append(r.AllowCIDRs, p)
	}
	if r.HookGrants, err = policy.ParseHookGrants(f.HooksSee); err != nil {
		return Run{}, err
	}
	if r.HookProject, err = policy.ParseHookProject(f.HooksProject); err != nil {
		return Run{}, err
	}
	if f.MCPListen != "" {
		ap, err := netip.ParseAddrPort(f.MCPListen)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
			return Run{}, fmt.Errorf("--mcp-listen %q: must be a loopback address with a port, e.g. 127.0.0.1:7777", f.MCPListen)
		}
		r.MCPListen = ap.String()
	}
	if f.MetricsListen != "" {
		ap, err := netip.ParseAddrPort(f.MetricsListen)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
			return Run{}, fmt.Errorf("--metrics-listen %q: must be a loopback address with a port, e.g. 127.0.0.1:9464", f.MetricsListen)
		}
		r.MetricsListen = ap.String()
	}
	for _, v := range f.TrustD {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); !manifest.ValidName(name) {
				return Run{}, fmt.Errorf("--plugin-tls-trustd %q: must be a kebab-case plugin name", v)
			}
			if !slices.Contains(r.TrustD, name) {
				r.TrustD = append(r.TrustD, name)
			}
		}
	}
	sort.Strings(r.TrustD)
	if f.NotifyRate < 0 || f.NotifyRate > MaxNotifyRate {
		return Run{}, fmt.Errorf("--server-notify-rate %d: must be 0 (the node's default) or a number of notifications a second from 1 to %d", f.NotifyRate, MaxNotifyRate)
	}
	r.NotifyRate = f.NotifyRate
	return r, nil
}

// Args renders the configuration as the canonical `run` flags, in a fixed order,
// for a service unit or plist. The data folder is included when set.
func (r Run) Args() []string {
	var a []string
	if r.DataDir != "" {
		a = append(a, "--data-dir", r.DataDir)
	}
	a = append(a, "--plugin-sandbox", string(r.Mode))
	if r.Backend != "" && r.Backend != "auto" {
		a = append(a, "--backend", r.Backend)
	}
	for _, e := range r.Exemptions {
		a = append(a, "--plugin-sandbox-exempt", e.String())
	}
	for _, name := range sortedKeys(r.PluginBackends) {
		a = append(a, "--plugin-backend", name+"="+r.PluginBackends[name])
	}
	for _, k := range sortedKeys(r.Labels) {
		a = append(a, "--label", k+"="+r.Labels[k])
	}
	for _, p := range r.AllowCIDRs {
		a = append(a, "--egress-allow-cidr", p.String())
	}
	if r.MCPListen != "" {
		a = append(a, "--mcp-listen", r.MCPListen)
	}
	if r.MetricsListen != "" {
		a = append(a, "--metrics-listen", r.MetricsListen)
	}
	for _, g := range r.HookGrants {
		a = append(a, policy.HookGrantFlag, g.String())
	}
	for _, name := range r.HookProject {
		a = append(a, policy.HookProjectFlag, name)
	}
	for _, name := range r.TrustD {
		a = append(a, "--plugin-tls-trustd", name)
	}
	if r.NotifyRate != 0 {
		a = append(a, "--server-notify-rate", strconv.Itoa(r.NotifyRate))
	}
	return a
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
