package sandbox

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
)

// Inner paths: fixed places inside a Linux sandbox, so nothing about the host's
// data folder layout is needed inside.
const (
	InnerProxyDir = "/run/oz0-egress"
	InnerNodeBin  = "/run/oz0-bin/oz0-node"
	ProxySocket   = "egress.sock"
	// DefaultProxyPort is the loopback port the proxy answers on inside a sandbox.
	DefaultProxyPort = 3128
	// BridgeHelper is the reexec helper name of the in-sandbox egress bridge.
	BridgeHelper = "egress-bridge"
	// InnerCABundle is where a Linux sandbox finds the node's CA bundle.
	InnerCABundle = "/run/oz0-ca/ca-bundle.pem"
)

// CAEnv are the variables that point a tool's TLS libraries at a CA bundle:
// OpenSSL and Go (SSL_CERT_FILE), Node.js (NODE_EXTRA_CA_CERTS), Python's
// requests (REQUESTS_CA_BUNDLE) and curl (CURL_CA_BUNDLE).
var CAEnv = []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}

// BridgeArgv is the egress bridge's command line, for backends. helper is the node
// binary as seen inside the sandbox, under a name that selects BridgeHelper (see
// node/reexec). The bridge listens on 127.0.0.1:port, forwards to innerSocket, and
// runs argv as its child with the tool's environment, stdio inherited; it forwards
// SIGTERM, SIGINT and SIGHUP and exits with the tool's code (128+signal if killed).
//
// With handoff (bwrap, whose sandbox sockets are host sockets) the bridge first
// offers its listener to the proxy and relays only if that is refused. With a
// resolver address the bridge is also the sandbox's gate for transparent egress
// (node/egress/gate.go): it answers DNS there by asking the node, before the tool
// starts.
func BridgeArgv(helper string, port int, innerSocket string, handoff bool, resolver string, argv []string) []string {
	out := []string{helper, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--socket", innerSocket}
	if handoff {
		out = append(out, "--handoff")
	}
	if resolver != "" {
		out = append(out, "--resolver", resolver)
	}
	out = append(out, "--")
	return append(out, argv...)
}

// Host describes the node's side of one start: where things live on this host.
type Host struct {
	OS        string // linux or darwin
	DataDir   string
	KeyFile   string
	PluginDir string // the installed plugin folder at its commit
	Home      string // the plugin's home / PLUGIN_DATA
	// PluginView, when set, is the writable view of the plugin's folder
	// (datadir.View): a backend with a mount namespace binds it, writable, at
	// PluginDir, so the plugin's paths are those of its installed commit, which
	// stays as installed; Seatbelt, which has none, is given it as the plugin's
	// folder itself. PluginViewReadOnly binds it read-only (Seatbelt's hook runs on
	// the agent's data, which get no view of their own).
	PluginView         string
	PluginViewReadOnly bool
	// PathsAreViews: the plan gave the plugin its view's paths (a node whose
	// sandboxes have no mount namespace), so even an unsandboxed run takes them.
	PathsAreViews bool
	// HookHome, when set, is the host folder that backs Home instead: the home of
	// a hook run that receives the agent's data (datadir.HookHome). A backend with
	// a mount namespace binds it at Home, so the hook's paths are the plugin's
	// usual ones; Seatbelt, which has none, is given it as the home itself.
	HookHome string
	// Others are other plugins' folders and homes, which must stay out of reach.
	Others []string
	// Runtimes are managed runtime folders (Python, Node.js) bound read-only.
	Runtimes []string
	// NodeBinary is the node's own executable, bound read-only for the bridge.
	NodeBinary string
	// ProxySocketDir is the host folder of this plugin's egress socket ("" when the
	// proxy is not serving, e.g. for unsandboxed runs).
	ProxySocketDir string
	// ProxyPort is the port to announce in the proxy variables. Linux sandboxes use
	// DefaultProxyPort inside their own namespace; host-network modes and Seatbelt
	// use the plugin's (server's) port on the host loopback (HostPort).
	ProxyPort int
	// ProxyCredential is the secret that host-loopback port requires; it goes into
	// the proxy URLs of the tool's environment, nowhere else.
	ProxyCredential string
	Defaults        Limits
	// TrustD: the operator granted this plugin macOS's trust daemon (Spec.TrustD).
	TrustD bool
	// ReadOnly are host paths the operator shows this plugin's sandboxes
	// read-only at their own paths (--plugin-ro-path).
	ReadOnly []string
	// CABundle, when set, is the node's CA bundle on the host (the host's roots
	// and the egress CA, no key): the plugin has secrets, which the proxy puts
	// into TLS requests it terminates (docs/promises.md §17), so its sandboxes
	// trust it — pointed at by CAEnv and, inside a Linux sandbox, bound over the
	// system bundle paths in SystemCABundles.
	CABundle        string
	SystemCABundles []string
}

// DefaultLimits apply where a manifest sets none.
var DefaultLimits = Limits{
	MemoryBytes:   1 << 30,
	Pids:          512,
	CPUPercent:    100,
	OpenFiles:     1024,
	FileSizeBytes: 1 << 30,
	Procs:         4096,
}

// SystemMounts is the read-only system allowlist of a Linux sandbox root: runtime
// libraries and the few /etc files that programs read to start. Never /, /run,
// /var/run, /tmp, /dev/shm or /home.
var SystemMounts = func() []Mount {
	var out []Mount
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		out = append(out, Mount{Source: p, Dest: p, Optional: true})
	}
	for _, p := range []string{
		"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
		"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/localtime", "/etc/nsswitch.conf",
		"/etc/host.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/gai.conf", "/etc/protocols",
		"/etc/services", "/etc/mime.types", "/etc/python3", "/etc/python3.11",
	} {
		out = append(out, Mount{Source: p, Dest: p, Optional: true})
	}
	return out
}()

// HostPort reports whether a sandbox on os, of backend, with network n reaches
// the proxy on a port of the host's loopback (every local process can reach such
// a port, so it requires a credential): the host network under auto, and the
// backends without a network namespace — Seatbelt and Landlock, whose rules allow
// a TCP connect to that one port. A bwrap or gVisor sandbox of its own network
// reaches the proxy inside it; an unsandboxed tool gets no proxy at all.
func HostPort(os, backend string, n policy.Network) bool {
	return n == policy.NetHostProxyVars || n == policy.NetProxy && (os != "linux" || backend == policy.BackendLandlock)
}

// NoMountNamespace reports whether a sandbox of backend on os has no mount
// namespace (Seatbelt, Landlock): it sees host paths where they are, so nothing can
// be shown at another path.
func NoMountNamespace(os, backend string) bool {
	return os != "linux" || backend == policy.BackendLandlock || backend == policy.BackendSeatbelt
}

// ProxyUser is the user name of the proxy URLs; the password is the credential.
const ProxyUser = "oz0"

// MinimalPath is the PATH a tool gets.
const MinimalPath = "/usr/local/bin:/usr/bin:/bin"

// DarwinPath is the PATH a Seatbelt tool gets: Homebrew's programs come before
// /usr/bin, whose python3 is a shim that asks for the developer tools.
const DarwinPath = "/opt/homebrew/bin:" + MinimalPath

// Build turns a decision for one target into a Spec. argv is the command to run
// (from the manifest for servers and hooks, from the operator for exec); m must be
// expanded for this installation. A refused target has no Spec.
func Build(d *policy.Decision, t policy.Target, m *manifest.Manifest, kind string, argv []string, cwd string, env map[string]string, h Host, lim manifest.Limits) (*Spec, error) {
	if err := buildable(d, t, argv, h); err != nil {
		return nil, err
	}
	s := &Spec{
		Plugin:   d.Plugin,
		Kind:     kind,
		Commit:   d.Commit,
		Backend:  t.Backend,
		Argv:     append([]string(nil), argv...),
		Network:  t.Network,
		Seccomp:  "default",
		Hostname: "oz0-" + d.Plugin,
		DataDir:  filepath.Clean(h.DataDir),

		PluginDir: filepath.Clean(h.PluginDir),
		Home:      filepath.Clean(h.Home),
		TrustD:    h.TrustD,
	}
	if kind == "server" {
		s.Server = t.Name
	}
	if t.Action == policy.Unsandboxed {
		s.Backend = policy.BackendNone
	}
	if t.User.PerPlugin {
		s.UID, s.GID, s.PluginUser = t.User.UID, t.User.GID, true
	}
	// Seatbelt and Landlock have no mount namespace: a path is where it is on the
	// host, so the plugin's view and a hook's home are given by their own paths.
	inPlace := h.PathsAreViews || NoMountNamespace(h.OS, t.Backend)
	folder := s.pluginFolder(t, h, inPlace)
	if err := s.workingFolder(cwd); err != nil {
		return nil, err
	}
	s.files(folder, h, inPlace)
	port, cred := s.network(t, h)
	s.trust(t, h, inPlace)
	s.Env = ToolEnv(m, s, env, port, cred, t.Network)
	s.Limits = limitsFor(h.Defaults, lim)
	if !s.PluginUser {
		s.Limits.Procs = 0 // RLIMIT_NPROC would count every process of the node's user
	}
	s.deny(h)
	return s, nil
}

// buildable refuses what has no sandbox: a refused or remote target, an empty
// command, a host folder given relative.
func buildable(d *policy.Decision, t policy.Target, argv []string, h Host) error {
	switch {
	case t.Action == policy.Refused:
		return fmt.Errorf("%s %s of plugin %s is refused: %s", t.Kind, t.Name, d.Plugin, t.Refusal())
	case t.Action == policy.Remote:
		// No plugin code runs for a remote server; nothing may run in its name.
		return fmt.Errorf("%s %s of plugin %s is remote: it has no sandbox to run anything in", t.Kind, t.Name, d.Plugin)
	case len(argv) == 0 || argv[0] == "":
		return fmt.Errorf("%s %s of plugin %s: empty command", t.Kind, t.Name, d.Plugin)
	}
	for _, p := range []struct{ what, p string }{{"plugin folder", h.PluginDir}, {"home", h.Home}, {"data folder", h.DataDir}} {
		if !filepath.IsAbs(p.p) {
			return fmt.Errorf("plugin %s: %s %q must be an absolute path", d.Plugin, p.what, p.p)
		}
	}
	return nil
}

// pluginFolder is the bind of the plugin's folder: its writable view where it has
// one, at the installed commit's path (or by its own path where there is no
// mount namespace), else the installed commit read-only.
func (s *Spec) pluginFolder(t policy.Target, h Host, inPlace bool) Mount {
	folder := Mount{Source: s.PluginDir, Dest: s.PluginDir}
	if h.PluginView != "" && (t.Action == policy.Sandboxed || inPlace) {
		folder.Source, folder.Writable = filepath.Clean(h.PluginView), !h.PluginViewReadOnly
		if inPlace {
			s.PluginDir, folder.Dest = folder.Source, folder.Source
		}
	}
	return folder
}

// workingFolder is the manifest's cwd, which must lie in the plugin's folder or
// its home.
func (s *Spec) workingFolder(cwd string) error {
	s.Dir = s.PluginDir
	if cwd == "" {
		return nil
	}
	if filepath.IsAbs(cwd) {
		s.Dir = filepath.Clean(cwd)
	} else {
		s.Dir = filepath.Join(s.PluginDir, cwd)
	}
	if s.Dir != s.PluginDir && !strings.HasPrefix(s.Dir, s.PluginDir+"/") && s.Dir != s.Home && !strings.HasPrefix(s.Dir, s.Home+"/") {
		return fmt.Errorf("plugin %s: working folder %q is outside the plugin folder and home", s.Plugin, cwd)
	}
	return nil
}

// files are the sandbox's root: the system allowlist, the plugin's folder, the
// paths the operator shows it, the managed runtimes and its home.
func (s *Spec) files(folder Mount, h Host, inPlace bool) {
	s.System = append([]Mount(nil), SystemMounts...)
	s.Mounts = append(s.Mounts, folder)
	for _, p := range h.ReadOnly {
		s.Mounts = append(s.Mounts, Mount{Source: filepath.Clean(p), Dest: filepath.Clean(p)})
	}
	for _, r := range h.Runtimes {
		r = filepath.Clean(r)
		if !isSystemPath(r) {
			s.Mounts = append(s.Mounts, Mount{Source: r, Dest: r})
		}
	}
	home := Mount{Source: s.Home, Dest: s.Home, Writable: true}
	if h.HookHome != "" {
		home.Source = filepath.Clean(h.HookHome)
		if inPlace {
			s.Home, home.Dest = home.Source, home.Source
		}
	}
	s.Mounts = append(s.Mounts, home)
}

// network is where the sandbox reaches the egress proxy: a socket bound into its
// own network namespace (with the node binary as the bridge), a port on the
// host's loopback with a credential, or nothing; it returns the port and
// credential the proxy variables name (0: none).
func (s *Spec) network(t policy.Target, h Host) (port int, cred string) {
	port, cred = h.ProxyPort, h.ProxyCredential
	hostPort := HostPort(h.OS, s.Backend, t.Network)
	switch {
	case t.Network == policy.NetProxy && !hostPort:
		port, cred = DefaultProxyPort, "" // inside the sandbox's own network: only it connects
		if h.ProxySocketDir != "" {
			s.Proxy = &Proxy{SocketDir: filepath.Clean(h.ProxySocketDir), SocketName: ProxySocket, InnerDir: InnerProxyDir, Port: port}
			s.Mounts = append(s.Mounts, Mount{Source: s.Proxy.SocketDir, Dest: InnerProxyDir})
			if h.NodeBinary != "" {
				s.Bridge = InnerNodeBin
				s.Mounts = append(s.Mounts, Mount{Source: h.NodeBinary, Dest: InnerNodeBin})
			}
		}
	case port != 0 && hostPort:
		s.Proxy = &Proxy{Port: port}
	default:
		port = 0
	}
	return port, cred
}

// trust gives a sandbox that reaches the proxy the node's CA bundle when the
// plugin has secrets (docs/promises.md §17): at a fixed inner path and over the
// system bundle files where there is a mount namespace, by its own path where
// there is none.
func (s *Spec) trust(t policy.Target, h Host, inPlace bool) {
	if h.CABundle == "" || t.Action != policy.Sandboxed || (t.Network != policy.NetProxy && t.Network != policy.NetHostProxyVars) {
		return
	}
	src := filepath.Clean(h.CABundle)
	s.CABundle = src
	if !inPlace {
		s.CABundle = InnerCABundle
		for _, sys := range h.SystemCABundles {
			if sys = filepath.Clean(sys); isSystemPath(sys) {
				s.Mounts = append(s.Mounts, Mount{Source: src, Dest: sys})
			}
		}
	}
	s.Mounts = append(s.Mounts, Mount{Source: src, Dest: s.CABundle})
}

// deny names what the sandbox must never reach: the data folder first, then the
// node's key and the other plugins' folders and homes, sorted.
func (s *Spec) deny(h Host) {
	deny := []string{s.DataDir}
	if h.KeyFile != "" {
		deny = append(deny, filepath.Clean(h.KeyFile))
	}
	for _, o := range h.Others {
		deny = append(deny, filepath.Clean(o))
	}
	sort.Strings(deny[1:])
	s.Deny = deny
}

func isSystemPath(p string) bool {
	for _, m := range SystemMounts {
		if p == m.Source || strings.HasPrefix(p, m.Source+"/") {
			return true
		}
	}
	return false
}

func limitsFor(def Limits, lim manifest.Limits) Limits {
	if def == (Limits{}) {
		def = DefaultLimits
	}
	l := def
	if lim.MemoryMB > 0 {
		l.MemoryBytes = int64(lim.MemoryMB) << 20
	}
	if lim.Pids > 0 {
		l.Pids = lim.Pids
	}
	if lim.CPUPct > 0 {
		l.CPUPercent = lim.CPUPct
	}
	if lim.OpenFiles > 0 {
		l.OpenFiles = lim.OpenFiles
	}
	return l
}

// reservedEnv are set by the node and cannot be overridden by a manifest.
var reservedEnv = map[string]bool{
	"HOME": true, "TMPDIR": true, "PLUGIN_ROOT": true, "PLUGIN_DATA": true,
	"CLAUDE_PLUGIN_ROOT": true, "CLAUDE_PLUGIN_DATA": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true,
	"http_proxy": true, "https_proxy": true, "all_proxy": true, "no_proxy": true,
	"NODE_USE_ENV_PROXY": true, "OZ0_PLUGIN": true,
}

// ToolEnv is the tool's whole environment: the node's minimal set, the manifest's
// env (which cannot override the node's own variables) and, where the network goes
// through the proxy, the proxy variables, which carry cred (when not "") as the
// password of the URL. Nothing comes from the node's environment.
func ToolEnv(m *manifest.Manifest, s *Spec, extra map[string]string, port int, cred string, net policy.Network) []string {
	env := map[string]string{
		"PATH":               MinimalPath,
		"LANG":               "C.UTF-8",
		"HOME":               s.Home,
		"TMPDIR":             "/tmp",
		"PLUGIN_ROOT":        s.PluginDir,
		"PLUGIN_DATA":        s.Home,
		"CLAUDE_PLUGIN_ROOT": s.PluginDir,
		"CLAUDE_PLUGIN_DATA": s.Home,
		"OZ0_PLUGIN":         m.Name,
	}
	if s.Backend == "seatbelt" {
		env["TMPDIR"] = path.Join(s.Home, "tmp")
		env["PATH"] = DarwinPath
	}
	for k, v := range extra {
		if !reservedEnv[k] {
			env[k] = v
		}
	}
	if s.CABundle != "" {
		for _, k := range CAEnv {
			env[k] = s.CABundle
		}
	}
	if port != 0 && (net == policy.NetProxy || net == policy.NetHostProxyVars) {
		proxy := func(scheme string) string {
			u := url.URL{Scheme: scheme, Host: "127.0.0.1:" + strconv.Itoa(port)}
			if cred != "" {
				u.User = url.UserPassword(ProxyUser, cred)
			}
			return u.String()
		}
		u := proxy("http")
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = u
		}
		socks := proxy("socks5h")
		env["ALL_PROXY"], env["all_proxy"] = socks, socks
		env["NO_PROXY"], env["no_proxy"] = "", ""
		env["NODE_USE_ENV_PROXY"] = "1"
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
