package backendlinux

import (
	"fmt"
	"path"
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"oz0.ai/node/node/sandbox"
)

// gvisorPidsHeadroom is added to a spec's pids limit: the cgroup counts the sentry's
// and gofer's host tasks too (an idle sandbox uses 72–91; 64 fails to start), while
// the plugin's own processes are held by RLIMIT_NPROC inside.
const gvisorPidsHeadroom = 128

// ociOptions are the per-start facts the runner knows: where the cgroup goes.
type ociOptions struct {
	CgroupsPath string
	GOARCH      string
}

// skelEntry is something created inside the bundle's empty rootfs before the start:
// a mount point (runsc runs with a read-only root and no overlay) or a system symlink.
type skelEntry struct {
	Path    string // inside the sandbox
	Dir     bool
	Symlink string
	// Data, when set, is the content of a file the node writes (the sandbox's
	// resolv.conf and hosts when the node is its resolver).
	Data []byte
}

// ociBundle is a config.json and the rootfs skeleton it needs.
type ociBundle struct {
	Spec *specs.Spec
	Skel []skelEntry
	// dirs are the folders already in Skel, while it is built.
	dirs map[string]bool
}

// ociConfig turns a Spec into an OCI runtime config for runsc. It decides only.
func ociConfig(s *sandbox.Spec, inspect Inspect, o ociOptions) (*ociBundle, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("plugin %s: empty command", s.Plugin)
	}
	if err := checkSeccompProfile(s); err != nil {
		return nil, err
	}
	if o.GOARCH == "" {
		o.GOARCH = runtime.GOARCH
	}
	b := &ociBundle{dirs: map[string]bool{}}
	b.Spec = &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: s.Hostname,
		Process:  ociProcess(s),
	}
	if err := b.mounts(s, inspect); err != nil {
		return nil, err
	}
	lin, err := ociLinux(s, o)
	if err != nil {
		return nil, err
	}
	b.Spec.Linux = lin
	return b, nil
}

// ociProcess is the tool's process: its argv, environment and folder, its user,
// no privileges and no capabilities, its rlimits.
func ociProcess(s *sandbox.Spec) *specs.Process {
	cwd := s.Dir
	if cwd == "" {
		cwd = "/"
	}
	none := []string{}
	proc := &specs.Process{
		User:            specs.User{UID: s.UID, GID: s.GID},
		Args:            append([]string(nil), s.Argv...),
		Env:             append([]string{}, s.Env...),
		Cwd:             cwd,
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none},
	}
	for _, r := range rlimits(s) {
		proc.Rlimits = append(proc.Rlimits, specs.POSIXRlimit{Type: r.name, Hard: r.value, Soft: r.value})
	}
	return proc
}

// mkdirs puts p and every folder above it in the bundle's skeleton once.
func (b *ociBundle) mkdirs(p string) {
	var parts []string
	for d := p; d != "/" && d != "."; d = path.Dir(d) {
		parts = append([]string{d}, parts...)
	}
	for _, d := range parts {
		if !b.dirs[d] {
			b.dirs[d] = true
			b.Skel = append(b.Skel, skelEntry{Path: d, Dir: true})
		}
	}
}

// mounts are the sandbox's file system: a fresh /proc, /dev and /tmp, the
// system allowlist and the Spec's binds by the rules every backend keeps
// (mountCheck), the node's resolv.conf and hosts where it is the sandbox's
// resolver, and the egress bridge in front of the tool.
func (b *ociBundle) mounts(s *sandbox.Spec, inspect Inspect) error {
	sp := b.Spec
	sp.Mounts = []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	b.mkdirs("/proc")
	b.mkdirs("/dev")
	b.mkdirs("/tmp")

	writable := writableDests(s)
	bind := func(m sandbox.Mount, dest string) error {
		dest = path.Clean(dest)
		info, skip, err := mountCheck(s, m, dest, writable, inspect)
		if err != nil || skip {
			return err
		}
		if info.Symlink != "" {
			b.mkdirs(path.Dir(dest))
			b.Skel = append(b.Skel, skelEntry{Path: dest, Symlink: info.Symlink})
			return nil
		}
		opts := []string{"rbind", "nosuid", "nodev", "ro"}
		if m.Writable {
			opts[3] = "rw"
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: dest, Type: "bind", Source: m.Source, Options: opts})
		b.mkdirs(path.Dir(dest))
		b.Skel = append(b.Skel, skelEntry{Path: dest, Dir: !info.File})
		b.dirs[dest] = true
		return nil
	}
	br := bridgeArgv(s, false)
	// The node is the sandbox's resolver through the bridge, its gate.
	resolver := br != nil && s.Proxy.Resolver != ""
	for _, m := range s.System {
		if d := path.Clean(m.Dest); resolver && (d == "/etc/resolv.conf" || d == "/etc/hosts") {
			continue // the node's own, below
		}
		if err := bind(m, m.Dest); err != nil {
			return err
		}
	}
	b.mkdirs("/etc")
	if resolver {
		b.Skel = append(b.Skel, skelEntry{Path: "/etc/resolv.conf", Data: sandbox.ResolvConf(s.Proxy.Resolver)},
			skelEntry{Path: "/etc/hosts", Data: sandbox.Hosts})
	}
	b.Skel = append(b.Skel, skelEntry{Path: "/etc/passwd", Data: sandbox.Passwd(s.Plugin, s.UID, s.GID, s.Home)},
		skelEntry{Path: "/etc/group", Data: sandbox.Group(s.Plugin, s.GID)})
	for _, m := range s.Mounts {
		if err := bind(m, m.Dest); err != nil {
			return err
		}
	}
	if br != nil {
		for _, m := range s.Mounts {
			if m.Dest == s.Bridge {
				if err := bind(sandbox.Mount{Source: m.Source}, br[0]); err != nil {
					return err
				}
			}
		}
		sp.Process.Args = br
	}
	return nil
}

// ociLinux is the sandbox's namespaces (its own network unless the policy names
// the host's), cgroup, resource limits and seccomp filter.
func ociLinux(s *sandbox.Spec, o ociOptions) (*specs.Linux, error) {
	lin := &specs.Linux{
		Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
		CgroupsPath: o.CgroupsPath,
	}
	if !hostNetwork(s.Network) {
		lin.Namespaces = append(lin.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	if l := s.Limits; l.MemoryBytes > 0 || l.Pids > 0 || l.CPUPercent > 0 {
		res := &specs.LinuxResources{}
		if l.MemoryBytes > 0 {
			m := l.MemoryBytes
			res.Memory = &specs.LinuxMemory{Limit: &m}
		}
		if l.Pids > 0 {
			p := int64(l.Pids + gvisorPidsHeadroom)
			res.Pids = &specs.LinuxPids{Limit: &p}
		}
		if l.CPUPercent > 0 {
			q, per := int64(l.CPUPercent*1000), uint64(100000)
			res.CPU = &specs.LinuxCPU{Quota: &q, Period: &per}
		}
		lin.Resources = res
	}
	sc, err := ociSeccomp(o.GOARCH)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	lin.Seccomp = sc
	return lin, nil
}
