package backendlinux

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/sandbox"
)

// Descriptor numbers the bwrap runner hands over (ExtraFiles start at 3). They are
// fixed so the argv a start builds is the argv `sandbox show` prints.
const (
	fdArgs      = 3 // the NUL-separated argv below (--args), so nothing shows in ps
	fdSeccomp   = 4 // the BPF program (--seccomp)
	fdInfo      = 5 // bwrap reports the sandbox's pid here (--info-fd)
	fdGate      = 6 // the gate: the tool is exec'ed only once the node writes here
	fdEnv       = 7 // the tool's environment, read by the gate just before it execs the tool
	fdFirstBind = 8 // bind sources, opened by the node without following symlinks
)

// gateScript runs first in the sandbox (/bin/sh from the system allowlist, under the
// seccomp filter) and execs the tool only after the node has set the sandbox's
// rlimits, served its egress endpoint and, unless bwrap was started inside it
// (Process.Start), moved it into its cgroup. That work overlaps bwrap's own setup
// behind this gate instead of delaying it (bwrap's --block-fd is read before the
// mounts). If the node closes the gate without a word, the read fails and the tool
// never runs.
//
// The gate itself starts with an empty environment: the tool's variables (an
// LD_PRELOAD among them) would otherwise load plugin code into the gate before the
// limits hold, and whatever it forked then would stay outside them. They arrive on
// fdEnv as export statements (envScript) that the gate reads only once the gate has
// opened, and reach a program only at the final exec. Both descriptors are closed
// before the tool starts.
const gateScript = `read -r _ <&6 || exit 125; exec 6<&-; . /dev/fd/7 || exit 125; exec 7<&-; exec "$@"`

// gateArgv0 names the gate process ($0 of the script) in ps and errors.
const gateArgv0 = "oz0-gate"

// PathInfo is what a bind source is on the host.
type PathInfo struct {
	Missing bool
	Symlink string // the link's target when the source itself is a symlink
	File    bool   // a file, not a folder (gVisor needs a file mount point)
}

// Inspect reports what a host path is; the runner uses lstat, tests a table.
type Inspect func(hostPath string) PathInfo

// bwrapPlan is the bwrap command for a Spec: Args (every option) go through --args;
// the tool's environment goes to the gate on fdEnv (Env), never to bwrap or the gate; Command follows "--" on bwrap's real command line,
// because bwrap 0.8 does not take the command from --args (it is the tool's own argv,
// which `ps` shows for the tool anyway). Sources[i] is the host path the runner opens
// as descriptor fdFirstBind+i.
type bwrapPlan struct {
	Args    []string
	Command []string
	Sources []source
	Env     []byte // the tool's environment, read by the gate from fdEnv
}

// source is a host path handed to bwrap as a descriptor: a folder or file to bind
// (opened O_PATH), or a small system file to copy into the sandbox (opened for
// reading). Copying the allowlisted /etc files instead of binding each one saves
// bwrap a mount apiece (~0.2 ms each here); they are read-only inside either way, as
// the root is remounted read-only.
type source struct {
	Path string
	Copy bool
	// Data, when set, is the file's content, written by the node (the runner
	// hands it over in a memfd); Path then only names it.
	Data []byte
}

// argv is bwrap's real command line after the program name.
func (p *bwrapPlan) argv() []string {
	return append([]string{"--args", strconv.Itoa(fdArgs), "--"}, p.Command...)
}

// errMountUnderWritable: bwrap before 0.12 follows a symlink a sandboxed process left
// in a writable folder when it creates a later mount point there.
var errMountUnderWritable = errors.New("mount point under a plugin-writable folder")

// buildBwrap turns a Spec into bwrap's arguments. It decides only: it opens nothing.
func buildBwrap(s *sandbox.Spec, inspect Inspect) (*bwrapPlan, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("plugin %s: empty command", s.Plugin)
	}
	if err := checkSeccompProfile(s); err != nil {
		return nil, err
	}
	p := &bwrapPlan{}
	add := func(a ...string) { p.Args = append(p.Args, a...) }
	add("--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL")
	if hostNetwork(s.Network) {
		add("--share-net")
	}
	if s.Hostname != "" {
		add("--hostname", s.Hostname)
	}
	add("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")

	writable := writableDests(s)
	bind := func(m sandbox.Mount, dest string, system bool) error {
		dest = path.Clean(dest)
		info, skip, err := mountCheck(s, m, dest, writable, inspect)
		if err != nil || skip {
			return err
		}
		if info.Symlink != "" {
			// System folders such as /bin → usr/bin on merged-/usr systems: recreate
			// the link instead of following it.
			add("--symlink", info.Symlink, dest)
			return nil
		}
		fd := strconv.Itoa(fdFirstBind + len(p.Sources))
		if system && info.File && !m.Writable {
			p.Sources = append(p.Sources, source{Path: m.Source, Copy: true})
			add("--perms", "0444", "--file", fd, dest)
			return nil
		}
		p.Sources = append(p.Sources, source{Path: m.Source})
		if m.Writable {
			add("--bind-fd", fd, dest)
		} else {
			add("--ro-bind-fd", fd, dest)
		}
		return nil
	}
	resolver := s.Proxy != nil && s.Proxy.Resolver != "" && s.Proxy.Attach != nil && s.Network == policy.NetProxy
	for _, m := range s.System {
		if resolver && (path.Clean(m.Dest) == "/etc/resolv.conf" || path.Clean(m.Dest) == "/etc/hosts") {
			continue // the node's own, below
		}
		if err := bind(m, m.Dest, true); err != nil {
			return nil, err
		}
	}
	var written []source
	if resolver {
		written = append(written, source{Path: "/etc/resolv.conf", Data: sandbox.ResolvConf(s.Proxy.Resolver)},
			source{Path: "/etc/hosts", Data: sandbox.Hosts})
	}
	uid, gid := toolIDs(s)
	written = append(written, source{Path: "/etc/passwd", Data: sandbox.Passwd(s.Plugin, uid, gid, s.Home)},
		source{Path: "/etc/group", Data: sandbox.Group(s.Plugin, gid)})
	for _, f := range written {
		fd := strconv.Itoa(fdFirstBind + len(p.Sources))
		p.Sources = append(p.Sources, f)
		add("--perms", "0444", "--file", fd, f.Path)
	}
	argv := s.Argv
	for _, m := range s.Mounts {
		if err := bind(m, m.Dest, false); err != nil {
			return nil, err
		}
	}
	if b := bridgeArgv(s, true); b != nil {
		// bwrap 0.8 has no --argv0: the node binary is bound a second time at the one
		// path whose name selects the bridge helper (node/reexec).
		for _, m := range s.Mounts {
			if m.Dest == s.Bridge {
				if err := bind(sandbox.Mount{Source: m.Source}, b[0], false); err != nil {
					return nil, err
				}
			}
		}
		argv = b
	}
	add("--remount-ro", "/")
	if s.Dir != "" {
		add("--chdir", s.Dir)
	}
	add("--seccomp", strconv.Itoa(fdSeccomp), "--info-fd", strconv.Itoa(fdInfo))
	add("--clearenv")
	env, err := envScript(s.Env)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	p.Env = env
	p.Command = append([]string{"/bin/sh", "-c", gateScript, gateArgv0}, argv...)
	return p, nil
}

// toolIDs are the uid and gid a bwrap tool runs as: the plugin's user, or else the
// node's own (bwrap's user namespace keeps it).
func toolIDs(s *sandbox.Spec) (uint32, uint32) {
	if s.PluginUser {
		return s.UID, s.GID
	}
	return uint32(os.Getuid()), uint32(os.Getgid())
}

// bridgeArgv is the command line that puts the egress bridge in front of the tool:
// it listens on the sandbox's loopback and forwards to the plugin's proxy socket.
// It is nil when the sandbox has no proxy endpoint to serve, or when this binary
// has no bridge helper (the egress package is not linked in): the sandbox then has
// loopback only, which fails closed.
//
// Under bwrap (handoff) the bridge offers its listener to the proxy, which then
// serves the sandbox's connections itself; gVisor's sockets are its own, not the
// host's, so there the bridge relays.
func bridgeArgv(s *sandbox.Spec, handoff bool) []string {
	if s.Network != policy.NetProxy || s.Bridge == "" || s.Proxy == nil || s.Proxy.SocketDir == "" {
		return nil
	}
	if s.Proxy.Attach != nil {
		return nil // the node serves the proxy inside the sandbox's namespace itself
	}
	if !bridgeAvailable() {
		return nil
	}
	port := s.Proxy.Port
	if port == 0 {
		port = sandbox.DefaultProxyPort
	}
	resolver := ""
	if !handoff {
		resolver = s.Proxy.Resolver // gVisor: the bridge is the sandbox's gate (see Proxy.Resolver)
	}
	return sandbox.BridgeArgv(reexec.SandboxPath(sandbox.BridgeHelper), port, s.Proxy.InnerSocket(), handoff, resolver, s.Argv)
}

// bridgeAvailable is replaced in tests; the real answer is whether this binary
// registered the bridge helper.
var bridgeAvailable = func() bool { return reexec.Registered(sandbox.BridgeHelper) }

// envKeyRE is a name the gate's shell can export; the manifest allows no other.
var envKeyRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envScript turns KEY=VALUE pairs into the export statements the gate reads from
// fdEnv: each value single-quoted, so the shell expands nothing in it.
func envScript(env []string) ([]byte, error) {
	var b strings.Builder
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envKeyRE.MatchString(k) {
			return nil, fmt.Errorf("environment entry %q is not NAME=VALUE with a shell variable name", kv)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("environment variable %s: value holds a NUL byte", k)
		}
		b.WriteString("export " + k + "='" + strings.ReplaceAll(v, "'", `'\''`) + "'\n")
	}
	return []byte(b.String()), nil
}

// hostNetwork reports whether a sandbox shares the host's network: only where
// the policy says so (auto mode's host network, an unsandboxed run); every other
// network — the proxy's, an isolated hook's — is a namespace of the sandbox's own.
func hostNetwork(n policy.Network) bool {
	return n == policy.NetHostProxyVars || n == policy.NetHost
}
