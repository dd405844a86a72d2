// Package backenddarwin is the macOS Seatbelt backend: a pure renderer from a
// sandbox.Spec to an SBPL profile with its -D parameters (tested on every OS), and a
// sandbox-exec runner built only on darwin.
package backenddarwin

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Profile is a rendered Seatbelt profile and the parameters sandbox-exec must be
// given with -D. Every path the profile names is a parameter, never part of Text.
type Profile struct {
	Text   string
	Params []Param

	// rewrite maps the Spec's spellings of its folders to the canonical ones.
	rewrite     [][2]string
	pendingPort bool
}

// Param is one -D NAME=VALUE parameter.
type Param struct {
	Name, Value string
}

// Args are the sandbox-exec arguments for the profile, before the command.
func (p Profile) Args() []string {
	a := []string{"-p", p.Text}
	for _, prm := range p.Params {
		a = append(a, "-D", prm.Name+"="+prm.Value)
	}
	return a
}

// SandboxExec is the runner. It is always called by its absolute path: a PATH
// lookup could pick up a look-alike.
const SandboxExec = "/usr/bin/sandbox-exec"

// Argv is the runner's whole command line for s: sandbox-exec, the profile, its
// parameters, "--" and the tool's argv, its paths in the canonical spelling the
// profile's parameters use.
func Argv(s *sandbox.Spec, o Options) ([]string, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, fmt.Errorf("seatbelt: plugin %s: empty command", s.Plugin)
	}
	if o.Preview {
		return nil, fmt.Errorf("seatbelt: plugin %s: a preview profile is never run", s.Plugin)
	}
	p, err := RenderProfileWith(s, o)
	if err != nil {
		return nil, err
	}
	out := append([]string{SandboxExec}, p.Args()...)
	out = append(out, "--")
	for _, a := range s.Argv {
		out = append(out, p.canon(a))
	}
	return out, nil
}

// Env is the tool's environment with the plugin folder, home and data folder in
// the canonical spelling the profile uses: runtimes that compare a realpath with
// $HOME or the script's path (Node.js, Python's prefix search) then agree with it.
func Env(s *sandbox.Spec, o Options) ([]string, error) {
	p, err := RenderProfileWith(s, o)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(s.Env))
	for i, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[i] = k + "=" + p.canon(v)
	}
	return out, nil
}

// Options are inputs the renderer cannot take from the Spec: facts of the Mac it
// runs on, found by the runner at each render, so the renderer stays pure.
type Options struct {
	// DeveloperDir is the developer tools folder `xcode-select -p` names (Command
	// Line Tools or an Xcode), read-only: /usr/bin/python3, git and cc are shims
	// that run from it. "" when none is set up.
	DeveloperDir string
	// Terminal is the terminal an `oz0-node exec` runs in (/dev/ttysN), given to
	// exec sandboxes only; servers and hooks never get a terminal.
	Terminal string
	// Preview renders for display only: a proxy port not assigned yet (no node
	// running) appears as PORT. Argv refuses it.
	Preview bool
}

// Limits from the kernel's side: sandbox-exec refuses profiles whose patterns pass
// 64 KiB, and macOS paths stop at PATH_MAX and NAME_MAX.
const (
	MaxProfileBytes = 65535
	maxPath         = 1024
	maxName         = 255
)

// ErrUnrepresentable marks a Spec the renderer refuses rather than weaken: a path
// that cannot be canonicalised safely, or denies that would not hold.
var ErrUnrepresentable = errors.New("cannot be represented safely in a Seatbelt profile")

// Tag prefixes every deny message, so violations can be found in the unified log
// (log show --predicate 'eventMessage CONTAINS "oz0-sandbox:"').
const Tag = "oz0-sandbox:"

var terminalRE = lazyre.New(`^/dev/ttys[0-9]{1,4}$`)

// System lists what a Node.js, Python or native tool needs to read on macOS. The
// Linux allowlist in sandbox.SystemMounts does not apply here: macOS keeps its
// runtime in other places. Paths are already canonical.
var (
	// SystemRead are folders read (and executed from) as whole subtrees.
	SystemRead = slices.Concat([]string{
		"/System/Library",
		"/System/Volumes/Preboot/Cryptexes",
		"/System/Cryptexes",
		"/usr/lib",
		"/usr/libexec",
		"/usr/share",
		"/usr/bin",
		"/usr/sbin",
		"/bin",
		"/sbin",
		"/Library/Frameworks",
		// xcode-select's link, which the /usr/bin shims follow to the developer folder.
		"/private/var/select",
		"/private/etc/ssl",
		"/private/var/db/timezone",
	}, packageRead())
	// SystemExec are the folders of SystemRead that hold programs a tool may run.
	SystemExec = func() map[string]bool {
		m := map[string]bool{
			"/System/Library": true, "/usr/lib": true, "/usr/libexec": true, "/usr/bin": true,
			"/usr/sbin": true, "/bin": true, "/sbin": true, "/Library/Frameworks": true,
		}
		for _, pre := range PackagePrefixes {
			for _, d := range PackageExec {
				m[pre+"/"+d] = true
			}
		}
		return m
	}()
	// PackagePrefixes are Homebrew's prefixes (Apple silicon, Intel). Only the
	// folders runtimes load from are readable: never var/ (databases, logs) or
	// etc/ (configuration, often with passwords), but for the CA bundles
	// Homebrew's OpenSSL reads, which hold no secret.
	PackagePrefixes = []string{"/opt/homebrew", "/usr/local"}
	PackageDirs     = []string{"bin", "lib", "Cellar", "opt", "share", "libexec", "include", "Frameworks", "etc/openssl@3", "etc/ca-certificates"}
	PackageExec     = []string{"bin", "lib", "Cellar", "opt", "libexec", "Frameworks"}
	// SystemFiles are single files read.
	SystemFiles = []string{
		"/private/etc/hosts",
		"/private/etc/localtime",
		"/private/etc/protocols",
		"/private/etc/services",
		"/private/var/db/xcode_select_link",
		"/dev/null",
		"/dev/zero",
		"/dev/random",
		"/dev/urandom",
		"/dev/stdin",
	}
	// DevFD is the descriptor folder: shells open /dev/fd/N for here-documents
	// and process substitution; /dev/stdout and /dev/stderr lead into it.
	DevFD = "/dev/fd"
	// DevWrite are devices a tool may write to.
	DevWrite = []string{"/dev/null", "/dev/zero", "/dev/stdout", "/dev/stderr"}
	// RootLinks are the links at / that lead to /private: runtimes resolving a path
	// one component at a time (Node's realpath) read them.
	RootLinks = []string{"/etc", "/tmp", "/var"}
	// Sysctls are the names a runtime reads at start (CPU count, page size, OS
	// version, Rosetta, Node's lockdown-mode check); SysctlPrefixes are read as
	// families.
	Sysctls = []string{
		"hw.activecpu", "hw.availcpu", "hw.byteorder", "hw.cachelinesize", "hw.cpufrequency",
		"hw.l1dcachesize", "hw.l2cachesize", "hw.logicalcpu", "hw.logicalcpu_max", "hw.machine",
		"hw.memsize", "hw.model", "hw.ncpu", "hw.pagesize", "hw.physicalcpu", "hw.physicalcpu_max",
		"kern.argmax", "kern.hostname", "kern.maxfilesperproc", "kern.osproductversion",
		"kern.osrelease", "kern.ostype", "kern.osversion", "kern.usrstack64", "kern.version",
		"machdep.cpu.brand_string", "security.mac.lockdown_mode_state", "sysctl.proc_cputype",
		"sysctl.proc_translated",
	}
	SysctlPrefixes = []string{"hw.optional.", "hw.perflevel"}
	// MachServices are the only services a tool may look up, each with why. Not
	// logd or the system logger (a plugin could write lines that look like another
	// plugin's denials) and not the notification center (a channel shared by every
	// plugin); runtimes work without them.
	MachServices = map[string]string{
		"com.apple.system.opendirectoryd.libinfo": "user and group names (getpwuid: Python's expanduser, Node's os.userInfo)",
	}
)

func packageRead() []string {
	var out []string
	for _, pre := range PackagePrefixes {
		for _, d := range PackageDirs {
			out = append(out, pre+"/"+d)
		}
	}
	return out
}

// TrustDService is the certificate trust daemon: TLS through Security.framework
// (Go's crypto/x509, Rust's native-tls, Python's truststore) asks it to evaluate
// certificates, and it fetches revocation data itself, outside the proxy. Granted
// only by the operator, per plugin (Spec.TrustD).
const TrustDService = "com.apple.trustd.agent"

// RenderProfile renders the profile for s without host facts (no developer
// folder, no terminal).
func RenderProfile(s *sandbox.Spec) (Profile, error) {
	return RenderProfileWith(s, Options{})
}

// Preview is the human-readable profile and parameters for `oz0-node sandbox
// show`: the profile the runner would run on this host (its host facts
// included), with a proxy port not assigned yet shown as PORT.
func Preview(s *sandbox.Spec) (string, error) {
	o := HostOptions(s)
	o.Preview = true
	return ShowWith(s, o)
}

// ShowWith is the human-readable profile and parameters rendered with o.
func ShowWith(s *sandbox.Spec, o Options) (string, error) {
	p, err := RenderProfileWith(s, o)
	if err != nil {
		return "", err
	}
	argv := make([]string, len(s.Argv))
	for i, a := range s.Argv {
		argv[i] = strconv.Quote(p.canon(a))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; %s -p PROFILE -D NAME=VALUE… -- %s\n", SandboxExec, strings.Join(argv, " "))
	if p.pendingPort {
		b.WriteString("; the egress proxy port is assigned when the node starts; PORT stands for it below\n")
	}
	if s.TrustD {
		fmt.Fprintf(&b, "; the operator granted %s (--plugin-tls-trustd %s)\n", TrustDService, s.Plugin)
	}
	if o.DeveloperDir == "" {
		b.WriteString("; developer folder: none (xcode-select -p names none, or this host is not a Mac)\n")
	}
	b.WriteString("; parameters (-D), in order:\n")
	for _, prm := range p.Params {
		fmt.Fprintf(&b, ";   %s=%s\n", prm.Name, strconv.Quote(prm.Value))
	}
	b.WriteString(p.Text)
	return b.String(), nil
}

// canon gives a path-like value of argv or env the canonical spelling the
// profile's parameters use.
func (p Profile) canon(v string) string {
	for _, r := range p.rewrite {
		if v == r[0] || strings.HasPrefix(v, r[0]+"/") {
			return r[1] + v[len(r[0]):]
		}
	}
	return v
}

// mount is one canonical place the profile allows.
type mount struct {
	path     string
	writable bool
}

// builder collects parameters, in order, and the profile's lines.
type builder struct {
	params []Param
	b      strings.Builder
}

func (r *builder) param(name, value string) string {
	r.params = append(r.params, Param{Name: name, Value: value})
	return `(param "` + name + `")`
}

func (r *builder) line(format string, args ...any) {
	fmt.Fprintf(&r.b, format, args...)
	r.b.WriteByte('\n')
}

// notALink checks that the last component of written (canonical c) is not a
// symlink: a home that is a link would grant whatever it points to.
func notALink(written, c string) error {
	t, err := canonicalText(written)
	if err != nil {
		return err
	}
	parent := path.Dir(t)
	if parent != "/" {
		if parent, err = Canonical(parent); err != nil {
			return err
		}
	}
	if want := path.Join(parent, path.Base(t)); c != want {
		return fmt.Errorf("is a link to %q: %w", c, ErrUnrepresentable)
	}
	return nil
}

// RenderProfileWith renders the Seatbelt profile for s. It is deterministic, and on
// any OS but darwin pure (on darwin, symlinks in existing paths are resolved). A Spec
// it cannot render safely is an error wrapping ErrUnrepresentable.
func RenderProfileWith(s *sandbox.Spec, o Options) (Profile, error) {
	if s == nil {
		return Profile{}, errors.New("seatbelt profile: nil spec")
	}
	if !manifest.ValidName(s.Plugin) {
		return Profile{}, fmt.Errorf("seatbelt profile: plugin name %q: %w (must be kebab-case)", s.Plugin, ErrUnrepresentable)
	}
	pl, err := collectPlaces(s, o)
	if err != nil {
		return Profile{}, err
	}
	r := &builder{}
	pl.emit(r)
	return pl.finish(r)
}

// places are what a profile is rendered from: the Spec's folders in their
// canonical spelling, checked against each other and the system paths.
type places struct {
	s *sandbox.Spec
	o Options
	// port is the egress proxy's port (0 for none); pending marks a preview whose
	// port is not assigned yet.
	port    int
	pending bool

	dataDir, pluginDir, home string
	devDir                   string // the developer folder, "" for none
	sysRead, sysFiles        []string
	// mounts are the allowed places: the plugin folder, the home, then the Spec's
	// other mounts, each once.
	mounts []mount
	// others are the denied places besides the data folder, sorted, each once.
	others []string
}

func (pl *places) fail(what, p string, err error) error {
	return fmt.Errorf("seatbelt profile for plugin %s: %s %q: %w", pl.s.Plugin, what, p, err)
}

// collectPlaces validates s and o and gathers every place the profile names. It
// refuses, wrapping ErrUnrepresentable, whatever the profile could not hold.
func collectPlaces(s *sandbox.Spec, o Options) (*places, error) {
	pl := &places{s: s, o: o}
	if err := pl.network(); err != nil {
		return nil, err
	}
	if o.Terminal != "" && !terminalRE.MatchString(o.Terminal) {
		return nil, pl.fail("terminal", o.Terminal, fmt.Errorf("is not a terminal device /dev/ttysN: %w", ErrUnrepresentable))
	}
	for _, step := range []func() error{pl.folders, pl.allowed, pl.checkAllowed, pl.denied} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// network checks the Spec's network: the proxy (on a valid port, or pending in a
// preview) or nothing.
func (pl *places) network() error {
	s := pl.s
	switch s.Network {
	case policy.NetProxy, policy.NetNone, policy.NetIsolated, "":
	default:
		return fmt.Errorf("seatbelt profile for plugin %s: network %q: Seatbelt only gives a sandbox the proxy or nothing: %w", s.Plugin, s.Network, ErrUnrepresentable)
	}
	if s.Network != policy.NetProxy {
		return nil
	}
	if s.Proxy == nil || s.Proxy.Port == 0 {
		pl.pending = pl.o.Preview
		return nil
	}
	pl.port = s.Proxy.Port
	if pl.port < 1 || pl.port > 65535 {
		return fmt.Errorf("seatbelt profile for plugin %s: proxy port %d: %w", s.Plugin, pl.port, ErrUnrepresentable)
	}
	return nil
}

// folders canonicalises the data folder, plugin folder, home, working folder and
// developer folder, and sets the system paths every sandbox reads.
func (pl *places) folders() error {
	s, o := pl.s, pl.o
	var err error
	if pl.dataDir, err = Canonical(s.DataDir); err != nil {
		return pl.fail("data folder", s.DataDir, err)
	}
	if pl.pluginDir, err = Canonical(s.PluginDir); err != nil {
		return pl.fail("plugin folder", s.PluginDir, err)
	}
	if pl.home, err = Canonical(s.Home); err != nil {
		return pl.fail("home", s.Home, err)
	}
	if err := notALink(s.Home, pl.home); err != nil {
		return pl.fail("home", s.Home, err)
	}
	if s.Dir != "" {
		dir, err := Canonical(s.Dir)
		if err != nil {
			return pl.fail("working folder", s.Dir, err)
		}
		if !within(dir, pl.pluginDir) && !within(dir, pl.home) {
			return pl.fail("working folder", s.Dir, fmt.Errorf("outside the plugin folder and home: %w", ErrUnrepresentable))
		}
	}
	if o.DeveloperDir != "" {
		if pl.devDir, err = Canonical(o.DeveloperDir); err != nil {
			return pl.fail("developer folder", o.DeveloperDir, err)
		}
	}
	pl.sysRead = slices.Clone(SystemRead)
	if pl.devDir != "" && !slices.Contains(pl.sysRead, pl.devDir) {
		pl.sysRead = append(pl.sysRead, pl.devDir)
	}
	pl.sysFiles = slices.Concat(SystemFiles, DevWrite, []string{DevFD})
	return nil
}

// allowed collects the allowed places: the plugin folder (read-only, or its
// writable view), the home (writable), and the Spec's other mounts (managed
// runtimes, read-only).
// Linux-only mounts such as the proxy socket folder have no Seatbelt meaning and
// are refused.
func (pl *places) allowed() error {
	seen := map[string]bool{}
	add := func(p string, w bool) {
		if !seen[p] {
			seen[p] = true
			pl.mounts = append(pl.mounts, mount{path: p, writable: w})
		}
	}
	// The plugin folder is read-only unless the Spec binds it writable: the
	// plugin's own view of its installed commit (node/view), never the commit.
	pluginWritable := false
	for _, m := range pl.s.Mounts {
		if c, err := Canonical(m.Source); err == nil && c == pl.pluginDir && m.Writable {
			pluginWritable = true
		}
	}
	add(pl.pluginDir, pluginWritable)
	add(pl.home, true)
	for _, m := range pl.s.Mounts {
		c, err := Canonical(m.Source)
		if err != nil {
			return pl.fail("mount", m.Source, err)
		}
		if m.Dest != "" && m.Dest != m.Source {
			return pl.fail("mount", m.Source, fmt.Errorf("appears at %q inside; Seatbelt has no mount namespace: %w", m.Dest, ErrUnrepresentable))
		}
		if c == pl.home && !m.Writable || c == pl.pluginDir && m.Writable != pluginWritable {
			return pl.fail("mount", m.Source, fmt.Errorf("writability disagrees with the plugin folder and home (writable): %w", ErrUnrepresentable))
		}
		if m.Writable {
			if err := notALink(m.Source, c); err != nil {
				return pl.fail("writable mount", m.Source, err)
			}
		}
		add(c, m.Writable)
	}
	return nil
}

// checkAllowed refuses allowed places the profile could not keep apart.
func (pl *places) checkAllowed() error {
	// A read-only place inside a writable one (or the reverse) would be neither.
	for i, a := range pl.mounts {
		for _, b := range pl.mounts[i+1:] {
			if a.writable != b.writable && (within(a.path, b.path) || within(b.path, a.path)) {
				return pl.fail("allowed path", b.path, fmt.Errorf("overlaps %q, which is writable where it is read-only or the reverse: %w", a.path, ErrUnrepresentable))
			}
		}
	}
	// System paths are readable and executable: a writable place among them would
	// let a tool write a program and run it.
	for _, m := range pl.mounts {
		if !m.writable {
			continue
		}
		for _, sys := range slices.Concat(pl.sysRead, pl.sysFiles) {
			if within(m.path, sys) || within(sys, m.path) {
				return pl.fail("writable path", m.path, fmt.Errorf("overlaps the system path %q: %w", sys, ErrUnrepresentable))
			}
		}
	}
	for _, m := range pl.mounts {
		if within(pl.dataDir, m.path) {
			return pl.fail("allowed path", m.path, fmt.Errorf("contains the data folder %q: %w", pl.dataDir, ErrUnrepresentable))
		}
	}
	return nil
}

// denied collects the denied places: the data folder (except this plugin's own
// folders in it), the node key, other plugins' folders and homes.
func (pl *places) denied() error {
	for _, d := range pl.s.Deny {
		c, err := Canonical(d)
		if err != nil {
			return pl.fail("denied path", d, err)
		}
		if c == pl.dataDir {
			continue
		}
		for _, m := range pl.mounts {
			if within(c, m.path) || within(m.path, c) {
				return pl.fail("denied path", d, fmt.Errorf("overlaps the allowed path %q: %w", m.path, ErrUnrepresentable))
			}
		}
		pl.others = append(pl.others, c)
	}
	sort.Strings(pl.others)
	pl.others = dedupe(pl.others)
	// Every sandbox reads the system paths; a denied place among them would be
	// reachable but for rule order, so it is refused rather than relied upon.
	for _, d := range append([]string{pl.dataDir}, pl.others...) {
		for _, sys := range slices.Concat(pl.sysRead, pl.sysFiles) {
			if within(d, sys) || within(sys, d) {
				return pl.fail("denied path", d, fmt.Errorf("overlaps the system path %q every sandbox reads; keep the data folder and plugins outside it: %w", sys, ErrUnrepresentable))
			}
		}
	}
	return nil
}

// refs are the (param …) references of the places rules name.
type refs struct {
	sysSub, sysExec, sysLit, devLit []string
	devFD                           string
	roSub, rwSub                    []string
	// viewExec is the plugin folder's reference when it is the plugin's writable
	// view: its code runs from there (a .venv's scripts, native modules).
	viewExec []string
	// anc are the folders above allowed places that only their own entry is
	// readable of (stat, never list), each named UP_<i> by its index.
	anc []string
}

// emit writes the profile's rules, allows first and denies last, naming every
// path as a parameter.
func (pl *places) emit(r *builder) {
	tag := Tag + pl.s.Plugin
	r.line("(version 1)")
	r.line(`(deny default (with message "%s"))`, tag)
	r.line("")
	r.line("; Processes: the tool may fork, and exec only what it can read but not write.")
	r.line("(allow process-fork)")
	r.line("(allow signal (target same-sandbox))")
	r.line("(allow process-info* (target same-sandbox))")
	r.line("; Host processor info: Node's os.cpus() is empty without it, and npm and yarn")
	r.line("; size their workers by it. Setting host ports needs the privileged host port,")
	r.line("; which no user process holds.")
	r.line("(allow mach-host*)")
	r.line("; POSIX semaphores: Python's multiprocessing locks. They hold no data.")
	r.line("(allow ipc-posix-sem)")
	ref := pl.params(r)
	pl.emitReads(r, ref)
	pl.emitMetadata(r, ref)
	pl.emitDevices(r, ref)
	pl.emitWrites(r, ref)
	pl.emitServices(r)
	pl.emitNetwork(r)
	pl.emitDenies(r, ref, tag)
}

// params names the system paths and allowed places as parameters, in the order
// sandbox-exec is given them.
func (pl *places) params(r *builder) *refs {
	ref := &refs{}
	for i, p := range pl.sysRead {
		name := "SYS_" + strconv.Itoa(i)
		if p == pl.devDir {
			name = "DEVELOPER_DIR"
		}
		v := r.param(name, p)
		ref.sysSub = append(ref.sysSub, v)
		if SystemExec[p] || p == pl.devDir {
			ref.sysExec = append(ref.sysExec, v)
		}
	}
	for i, p := range SystemFiles {
		ref.sysLit = append(ref.sysLit, r.param("SYSFILE_"+strconv.Itoa(i), p))
	}
	for i, p := range DevWrite {
		ref.devLit = append(ref.devLit, r.param("DEV_"+strconv.Itoa(i), p))
	}
	ref.devFD = r.param("DEV_FD", DevFD)
	ro, rw := 0, 0
	for _, m := range pl.mounts {
		var name string
		switch {
		case m.path == pl.pluginDir:
			name = "PLUGIN_DIR"
		case m.path == pl.home:
			name = "HOME_DIR"
		case m.writable:
			name = "RW_" + strconv.Itoa(rw)
			rw++
		default:
			name = "RO_" + strconv.Itoa(ro)
			ro++
		}
		v := r.param(name, m.path)
		if m.writable && m.path == pl.pluginDir {
			ref.viewExec = append(ref.viewExec, v)
		}
		if m.writable {
			ref.rwSub = append(ref.rwSub, v)
		} else {
			ref.roSub = append(ref.roSub, v)
		}
	}
	return ref
}

// emitReads allows exec where it is safe and reads of the system runtime and the
// allowed places.
func (pl *places) emitReads(r *builder, ref *refs) {
	// dyld needs file-map-executable for every library outside the shared cache
	// (Homebrew's, a plugin's native modules): granted where exec is. Exec is
	// from read-only places, and from the plugin's writable view: its code lives
	// there (a .venv's entry points, node_modules' native modules) as it does in
	// the installed commit; the home stays write-only-never-exec.
	r.line("(allow process-exec file-map-executable")
	for _, v := range slices.Concat(ref.sysExec, ref.roSub, ref.viewExec) {
		r.line("  (subpath %s)", v)
	}
	r.line(")")
	r.line("")
	r.line("; Reads: the named system runtime, the plugin folder, managed runtimes, the home.")
	r.line("(allow file-read*")
	for _, v := range ref.sysSub {
		r.line("  (subpath %s)", v)
	}
	for _, v := range slices.Concat(ref.sysLit, ref.devLit) {
		r.line("  (literal %s)", v)
	}
	for _, v := range append(append([]string(nil), ref.roSub...), ref.rwSub...) {
		r.line("  (subpath %s)", v)
	}
	r.line(")")
}

// emitMetadata lets runtimes stat the folders above each allowed place: they
// resolve paths one component at a time (Node's realpath, Python's prefix
// search), so those folders, and the links at / into /private, may be stat'ed —
// never listed or read.
func (pl *places) emitMetadata(r *builder, ref *refs) {
	var allowed []string
	for _, m := range pl.mounts {
		allowed = append(allowed, m.path)
	}
	allowed = slices.Concat(allowed, pl.sysRead, pl.sysFiles)
	for _, a := range ancestors(allowed) {
		readable := false
		for _, sub := range slices.Concat(pl.sysRead, mountPaths(pl.mounts)) {
			readable = readable || within(a, sub)
		}
		if !readable {
			ref.anc = append(ref.anc, a)
		}
	}
	r.line("(allow file-read-metadata")
	r.line("  (literal %s)", r.param("ROOT", "/"))
	for i, a := range ref.anc {
		r.line("  (literal %s)", r.param("UP_"+strconv.Itoa(i), a))
	}
	for i, l := range RootLinks {
		r.line("  (literal %s)", r.param("LINK_"+strconv.Itoa(i), l))
	}
	r.line(")")
}

// emitDevices allows the standard streams, the descriptor folder and, for exec
// only, the terminal it was started from.
func (pl *places) emitDevices(r *builder, ref *refs) {
	r.line("")
	r.line("; Devices: the standard streams, and the descriptor folder shells use for")
	r.line("; here-documents and process substitution.")
	r.line("(allow file-read* file-write-data (subpath %s))", ref.devFD)
	r.line("(allow file-write-data")
	for _, v := range ref.devLit {
		r.line("  (literal %s)", v)
	}
	r.line(")")
	if pl.o.Terminal != "" && pl.s.Kind == "exec" {
		r.line("; The terminal `oz0-node exec` was started from (exec only; servers and hooks never get one).")
		r.line("(allow file-read* file-write-data file-ioctl")
		r.line("  (literal %s)", r.param("TTY", "/dev/tty"))
		r.line("  (literal %s)", r.param("TERMINAL", pl.o.Terminal))
		r.line(")")
	}
}

// emitWrites allows writes and unix sockets beneath the writable places.
func (pl *places) emitWrites(r *builder, ref *refs) {
	r.line("")
	r.line("; Writes: beneath the home (TMPDIR lies inside it), never its own entry (denied below).")
	r.line("(allow file-write*")
	for _, v := range ref.rwSub {
		r.line("  (subpath %s)", v)
	}
	r.line(")")
	r.line("; Unix sockets bound and connected beneath the home (multiprocessing managers,")
	r.line("; browser drivers); nowhere else.")
	r.line("(allow network-bind network-inbound")
	for _, v := range ref.rwSub {
		r.line("  (local unix-socket (subpath %s))", v)
	}
	r.line(")")
	r.line("(allow network-outbound")
	for _, v := range ref.rwSub {
		r.line("  (remote unix-socket (subpath %s))", v)
	}
	r.line(")")
	r.line("")
}

// emitServices allows the sysctls runtimes read and the mach services named,
// each with why.
func (pl *places) emitServices(r *builder) {
	r.line("(allow sysctl-read")
	for _, n := range Sysctls {
		r.line(`  (sysctl-name "%s")`, n)
	}
	for _, n := range SysctlPrefixes {
		r.line(`  (sysctl-name-prefix "%s")`, n)
	}
	r.line(")")
	services := map[string]string{}
	for n, why := range MachServices {
		services[n] = why
	}
	if pl.s.TrustD {
		services[TrustDService] = "certificate trust for Security.framework TLS, granted by the operator (--plugin-tls-trustd); it reaches the network outside the proxy"
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.line("; %s: %s.", n, services[n])
	}
	r.line("(allow mach-lookup")
	for _, n := range names {
		r.line(`  (global-name "%s")`, n)
	}
	r.line(")")
	r.line("")
}

// emitNetwork allows the egress proxy's port on the host loopback, or nothing.
func (pl *places) emitNetwork(r *builder) {
	switch {
	case pl.port != 0:
		r.line("; Network: out to the plugin's egress proxy on the host loopback, nothing else.")
		r.line(`(allow network-outbound (remote ip "localhost:%d"))`, pl.port)
	case pl.pending:
		r.line("; Network: out to the plugin's egress proxy on the host loopback, nothing else;")
		r.line("; its port is assigned when the node starts.")
		r.line(`(allow network-outbound (remote ip "localhost:PORT"))`)
	default:
		r.line("; Network: none.")
	}
	r.line("")
}

// emitDenies writes the denies, last, so nothing above can undo them: the data
// folder but for this plugin's own places in it, the node's sockets, the home's
// own entry, and the other plugins' places.
func (pl *places) emitDenies(r *builder, ref *refs, tag string) {
	r.line("; Denies last, so nothing above can undo them.")
	var own []string
	for _, m := range pl.mounts {
		if within(m.path, pl.dataDir) {
			own = append(own, r.byRef(m.path))
		}
	}
	dataRef := r.param("DATA_DIR", pl.dataDir)
	var upInData []string
	for i, a := range ref.anc {
		if within(a, pl.dataDir) {
			upInData = append(upInData, `(param "UP_`+strconv.Itoa(i)+`")`)
		}
	}
	r.line(`(deny file-read* file-write* process-exec file-map-executable (with message "%s")`, tag)
	r.line("  (require-all")
	r.line("    (subpath %s)", dataRef)
	for _, v := range own {
		r.line("    (require-not (subpath %s))", v)
	}
	for _, v := range upInData {
		r.line("    (require-not (literal %s))", v)
	}
	r.line("  )")
	r.line(")")
	r.line(`(deny file-read-data file-read-xattr file-write* process-exec file-map-executable (with message "%s")`, tag)
	for _, v := range upInData {
		r.line("  (literal %s)", v)
	}
	r.line("  (literal %s)", dataRef)
	r.line(")")
	r.line("; The node's sockets (control, MCP, egress) live in the data folder.")
	r.line(`(deny network-outbound (with message "%s")`, tag)
	r.line("  (require-all")
	r.line("    (subpath %s)", dataRef)
	for _, v := range ref.rwSub {
		r.line("    (require-not (subpath %s))", v)
	}
	r.line("  )")
	r.line(")")
	r.line("; The home's own entry: removed or renamed, it could come back as a link to")
	r.line("; anywhere, which the next start would grant.")
	r.line(`(deny file-write* (with message "%s")`, tag)
	for _, v := range ref.rwSub {
		r.line("  (literal %s)", v)
	}
	r.line(")")
	if len(pl.others) > 0 {
		r.line(`(deny file-read* file-write* process-exec file-map-executable network-outbound (with message "%s")`, tag)
		for i, d := range pl.others {
			r.line("  (subpath %s)", r.param("DENY_"+strconv.Itoa(i), d))
		}
		r.line(")")
	}
}

// finish assembles the Profile: its text, parameters and the rewrite from the
// Spec's spellings to the canonical ones; a profile over sandbox-exec's limit is
// refused.
func (pl *places) finish(r *builder) (Profile, error) {
	s := pl.s
	p := Profile{Text: r.b.String(), Params: r.params, pendingPort: pl.pending}
	// Longest first: the home and plugin folder lie inside the data folder.
	for _, rw := range [][2]string{{filepath.Clean(s.Home), pl.home}, {filepath.Clean(s.PluginDir), pl.pluginDir}, {filepath.Clean(s.DataDir), pl.dataDir}} {
		if rw[0] != rw[1] {
			p.rewrite = append(p.rewrite, rw)
		}
	}
	sort.SliceStable(p.rewrite, func(i, j int) bool { return len(p.rewrite[i][0]) > len(p.rewrite[j][0]) })
	size := len(p.Text)
	for _, prm := range p.Params {
		size += len(prm.Value)
	}
	if size > MaxProfileBytes {
		return Profile{}, fmt.Errorf("seatbelt profile for plugin %s: %d bytes with parameters, over the %d-byte limit: %w", s.Plugin, size, MaxProfileBytes, ErrUnrepresentable)
	}
	return p, nil
}

// byRef returns the (param …) reference of an allowed place already named.
func (r *builder) byRef(value string) string {
	for _, p := range r.params {
		if p.Value == value && (p.Name == "PLUGIN_DIR" || p.Name == "HOME_DIR" || strings.HasPrefix(p.Name, "RO_") || strings.HasPrefix(p.Name, "RW_")) {
			return `(param "` + p.Name + `")`
		}
	}
	panic("backenddarwin: no parameter for " + value)
}

func mountPaths(ms []mount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.path
	}
	return out
}

// ancestors are the folders strictly above each path, "/" excluded, sorted.
func ancestors(paths []string) []string {
	set := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			set[d] = true
		}
	}
	// An ancestor that is itself an allowed path is already readable.
	for _, p := range paths {
		delete(set, p)
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func dedupe(ss []string) []string {
	out := ss[:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// within reports whether p is root or lies under it.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// Canonical returns the path as macOS itself names it: /tmp, /var and /etc under
// /private, no "//", no trailing "/", and (on darwin) symlinks in its existing part
// resolved. Paths with "." or ".." components, control characters, invalid UTF-8,
// or beyond PATH_MAX/NAME_MAX are refused: guessing would weaken the profile.
func Canonical(p string) (string, error) {
	c, err := canonicalText(p)
	if err != nil {
		return "", err
	}
	r, err := resolve(c)
	if err != nil {
		return "", fmt.Errorf("resolve symlinks in %q: %w", c, err)
	}
	if r != c {
		// The resolved path must itself be canonical.
		return canonicalText(r)
	}
	return c, nil
}

// resolve is resolveSymlinks; tests replace it with a model of a Mac's links.
var resolve = resolveSymlinks

func canonicalText(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", fmt.Errorf("not an absolute path: %w", ErrUnrepresentable)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("not valid UTF-8: %w", ErrUnrepresentable)
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == utf8.RuneError {
			return "", fmt.Errorf("contains a control character: %w", ErrUnrepresentable)
		}
	}
	var parts []string
	for _, e := range strings.Split(p, "/") {
		switch e {
		case "":
			continue // "//" and a trailing "/" name the same folder
		case ".", "..":
			return "", fmt.Errorf("has a %q component: %w", e, ErrUnrepresentable)
		}
		if len(e) > maxName {
			return "", fmt.Errorf("a name is longer than %d bytes: %w", maxName, ErrUnrepresentable)
		}
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("is the root folder: %w", ErrUnrepresentable)
	}
	switch parts[0] {
	case "tmp", "var", "etc":
		parts = append([]string{"private"}, parts...)
	}
	c := "/" + strings.Join(parts, "/")
	if len(c) >= maxPath {
		return "", fmt.Errorf("longer than %d bytes: %w", maxPath-1, ErrUnrepresentable)
	}
	return c, nil
}
