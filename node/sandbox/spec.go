// Package sandbox describes, independent of any OS, what a plugin's sandbox must
// provide (Spec), the interface each backend implements, and the one function that
// turns a policy decision into a Spec, so servers, hooks and `oz0-node exec` all get
// the same sandbox.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"oz0.ai/node/node/policy"
)

// Mount is one bind into the sandbox. Sources are host paths; Dest is the path
// inside (backends without a mount namespace, such as Seatbelt, use Source).
type Mount struct {
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	Writable bool   `json:"writable,omitempty"`
	// Optional mounts are skipped when the source does not exist (e.g. /lib64).
	Optional bool `json:"optional,omitempty"`
}

// Limits are resource limits for one sandbox. Zero means "not set".
type Limits struct {
	MemoryBytes   int64 `json:"memory_bytes,omitempty"`
	Pids          int   `json:"pids,omitempty"`
	CPUPercent    int   `json:"cpu_percent,omitempty"` // of one core
	OpenFiles     int   `json:"open_files,omitempty"`
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	// Procs is RLIMIT_NPROC, counted per uid across all of a plugin's sandboxes.
	Procs int `json:"procs,omitempty"`
}

// Proxy is where a sandboxed process reaches the node's egress proxy.
type Proxy struct {
	// SocketDir is the host folder holding the plugin's proxy socket. The folder, not
	// the file, is bound into the sandbox so a proxy restart does not break the bind.
	SocketDir string `json:"socket_dir,omitempty"`
	// SocketName is the socket's file name inside SocketDir.
	SocketName string `json:"socket_name,omitempty"`
	// InnerDir is where SocketDir appears inside the sandbox.
	InnerDir string `json:"inner_dir,omitempty"`
	// Port is the loopback port the proxy answers on inside the sandbox (or, for
	// host-network backends, on the host's loopback).
	Port int `json:"port"`
	// Attach, when set, serves the proxy on Port from inside the sandbox's own
	// network namespace (given as a /proc/PID/ns/net path) instead of through the
	// in-sandbox bridge: one process and one hop fewer. A backend that can (bwrap
	// on a root node) calls it before the tool starts and calls detach on cleanup.
	Attach func(netnsPath string) (detach func(), err error) `json:"-"`
	// Resolver, when set, is the sandbox's nameserver (ResolverAddr) for
	// transparent egress: the backend gives the sandbox a resolv.conf naming it
	// and a hosts file with only localhost, in place of the host's. Attach serves
	// it where set; otherwise the in-sandbox bridge does, as the sandbox's gate
	// (gVisor). bwrap without Attach ignores it: its tool runs in a user namespace
	// nested below the one owning its network, so nothing inside may bind port 53.
	Resolver string `json:"resolver,omitempty"`
}

// Endpoint is one egress endpoint a plugin's sandboxes need: its own (Server "",
// which its hooks use) or one of a server's. HostPort: a port on the host's
// loopback as well, which requires the endpoint's credential (auto, Seatbelt).
// GID is the plugin user's group, the only one besides the node's user that may
// connect to the socket; 0 when the plugin runs as the node's user.
type Endpoint struct {
	Server   string
	HostPort bool
	GID      uint32
}

// ResolverAddr is where the node answers a sandbox's DNS on the sandbox's own
// loopback, when it serves transparent egress there.
const ResolverAddr = "127.0.0.53"

// ResolvConf and Hosts are the sandbox's /etc/resolv.conf and /etc/hosts when the
// node is its resolver: the node alone, no search domains (a short name would
// be asked under each), and no name but localhost.
func ResolvConf(resolver string) []byte {
	return []byte("# written by oz0-node: the node answers only the names this sandbox may reach\nnameserver " + resolver + "\noptions ndots:1 attempts:2 timeout:2\n")
}

// Hosts is the sandbox's /etc/hosts when the node is its resolver.
var Hosts = []byte("127.0.0.1 localhost\n::1 localhost\n")

// Passwd and Group are a Linux sandbox's /etc/passwd and /etc/group. The host's
// are not shown (they name the host's users), yet programs look up their own user
// there: Node.js's os.homedir() and `id -un` when HOME is unset (a server started
// through `env -i`), Python's pwd, git and ssh. They name root, the tool's user
// (uid, gid; its home is the plugin's home) and nobody.
func Passwd(plugin string, uid, gid uint32, home string) []byte {
	if strings.ContainsAny(home, ":\n") {
		home = "/" // a field separator would break the line; the tool still has HOME
	}
	rootHome := "/root"
	var b strings.Builder
	if uid == 0 {
		rootHome = home // the tool runs as root: its home is still the plugin's
	}
	fmt.Fprintf(&b, "root:x:0:0:root:%s:/bin/sh\n", rootHome)
	if uid != 0 && uid != nobodyID {
		fmt.Fprintf(&b, "%s:x:%d:%d:oz0 plugin %s:%s:/bin/sh\n", SandboxUser(plugin), uid, gid, plugin, home)
	}
	fmt.Fprintf(&b, "nobody:x:%d:%d:nobody:/nonexistent:/usr/sbin/nologin\n", nobodyID, nobodyID)
	return []byte(b.String())
}

// Group is the sandbox's /etc/group (see Passwd).
func Group(plugin string, gid uint32) []byte {
	var b strings.Builder
	b.WriteString("root:x:0:\n")
	if gid != 0 && gid != nobodyID {
		fmt.Fprintf(&b, "%s:x:%d:\n", SandboxUser(plugin), gid)
	}
	fmt.Fprintf(&b, "nogroup:x:%d:\n", nobodyID)
	return []byte(b.String())
}

// SandboxUser is the name of a plugin's user inside its Linux sandboxes.
func SandboxUser(plugin string) string { return "oz0-" + plugin }

const nobodyID = 65534

// InnerSocket is the proxy socket's path inside the sandbox.
func (p *Proxy) InnerSocket() string { return p.InnerDir + "/" + p.SocketName }

// Spec is what one sandboxed process must get. It never holds "all of /": the root
// is built from System (read-only) plus Mounts.
type Spec struct {
	Plugin  string `json:"plugin"`
	Server  string `json:"server,omitempty"`
	Kind    string `json:"kind"` // server, hook or exec
	Commit  string `json:"commit,omitempty"`
	Backend string `json:"backend"`

	Argv []string `json:"argv"`
	// Env is the tool's whole environment: the node's minimal set plus the manifest's
	// env. It reaches the tool only, never the runner's own environment.
	Env []string `json:"env"`
	Dir string   `json:"dir"` // working folder inside

	// System are read-only system runtime folders (an allowlist).
	System []Mount `json:"system"`
	// Mounts are the plugin folder (read-only), managed runtimes (read-only), the node
	// binary (read-only, for the in-sandbox bridge) and the home (writable).
	Mounts    []Mount `json:"mounts"`
	PluginDir string  `json:"plugin_dir"`
	Home      string  `json:"home"`

	// UID/GID the sandbox runs as; PluginUser when they are the per-plugin user.
	UID        uint32 `json:"uid"`
	GID        uint32 `json:"gid"`
	PluginUser bool   `json:"plugin_user"`

	Network policy.Network `json:"network"`
	Proxy   *Proxy         `json:"proxy,omitempty"`
	// TrustD is the operator's grant (--plugin-tls-trustd) of macOS's certificate
	// trust daemon, which TLS through Security.framework needs and which reaches the
	// network outside the proxy. Only Seatbelt reads it.
	TrustD bool `json:"trustd,omitempty"`
	// CABundle is the node's CA bundle as the tool finds it (CAEnv point at it):
	// set for a plugin with secrets (docs/promises.md §17).
	CABundle string `json:"ca_bundle,omitempty"`
	// Bridge is the node binary as seen inside the sandbox; when set with a NetProxy
	// network the backend runs it (reexec helper "egress-bridge") in front of Argv
	// to serve Proxy.Port on the sandbox's loopback.
	Bridge string `json:"bridge,omitempty"`

	Limits   Limits `json:"limits"`
	Seccomp  string `json:"seccomp"` // profile name; "default"
	Hostname string `json:"hostname"`

	// DataDir and Deny are host paths the sandbox must never reach: the data folder,
	// the node key, other plugins' folders and homes. Backends without a mount
	// namespace (Seatbelt) turn them into explicit denies; tests check them all.
	DataDir string   `json:"data_dir"`
	Deny    []string `json:"deny"`
}

// Process is a prepared sandboxed process. Cmd is ready to Start (the MCP client's
// CommandTransport starts it); Cleanup releases what the backend set up (cgroups,
// OCI bundle) and kills anything left, once the process has exited.
type Process struct {
	Cmd     *exec.Cmd
	Cleanup func() error
	// Starter, when a backend sets it, starts Cmd in a way that spares the sandbox
	// set-up work after the start (bwrap: born inside its cgroup rather than moved
	// there). Callers that start Cmd themselves get the same sandbox, a little later.
	Starter func() error
}

// Start starts the process, through the backend's Starter when it has one.
func (p *Process) Start() error {
	if p.Starter != nil {
		return p.Starter()
	}
	return p.Cmd.Start()
}

// Backend is one sandbox implementation.
type Backend interface {
	// Name is bwrap, gvisor, landlock or seatbelt.
	Name() string
	// Probe runs a trivial sandbox for real and reports whether the backend works.
	Probe(ctx context.Context) Probe
	// Command prepares the process for a Spec. The caller sets Stdin/Stdout/Stderr.
	Command(ctx context.Context, s *Spec) (*Process, error)
	// Render shows, without running anything, what Command would build (bwrap argv,
	// OCI config.json, Seatbelt profile and parameters).
	Render(s *Spec) (string, error)
}

// Probe is a backend's probe result.
type Probe struct {
	Name    string
	Works   bool
	Version string
	Err     error
	// Gaps are promises the backend cannot keep on this machine, in the
	// operator's words (Landlock lists its own and those its kernel's ABI lacks).
	Gaps []string
}

// ErrUnavailable is returned when a requested backend does not work here.
var ErrUnavailable = errors.New("sandbox backend unavailable")
