// Package doctor says whether this machine and data folder give the node what it
// needs — a working sandbox backend, user namespaces, cgroups, a sound data folder,
// a readable tenant list, a matching service unit, free sockets, a sane clock — and
// how to fix each miss. Evaluate decides from Facts (pure); gathering the facts is
// I/O done by the callers and by Gather* below.
package doctor

import (
	"fmt"
	"strings"
	"time"
)

// Status is a check's verdict.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip" // not checked on this OS or as this user
)

// Check is one line of the report: what was checked, what was found, how to fix it.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the doctor's answer. Tier is the sandbox tier the node reaches here:
// 1 with a working backend, 0 without (every plugin would run unsandboxed).
type Report struct {
	OS      string  `json:"os"`
	Root    bool    `json:"root"`
	DataDir string  `json:"data_dir"`
	Tier    int     `json:"tier"`
	Backend string  `json:"backend"` // the one `run --backend auto` would pick, or none
	Checks  []Check `json:"checks"`
}

// Backend is what a sandbox backend's own probe found (the node's probe: a real
// sandbox running `ls /`, as the user plugins would run as).
type Backend struct {
	Name    string // bwrap, gvisor, landlock, seatbelt
	Path    string // "" when not installed (Landlock has no program: the kernel is all)
	Version string
	Works   bool
	Err     string
	// Gaps are what the backend cannot keep here (Landlock's tier and ABI gaps).
	Gaps []string
}

// Userns are the kernel settings that decide whether an unprivileged process may
// create a user namespace (what bwrap needs when it does not run as root). -1 means
// the setting does not exist here (or could not be read).
type Userns struct {
	MaxUserNamespaces       int // user.max_user_namespaces
	AppArmorRestrict        int // kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+)
	UnprivilegedUsernsClone int // kernel.unprivileged_userns_clone (Debian/Ubuntu patch)
	// RootWithoutSysAdmin: the node runs as root without CAP_SYS_ADMIN, as in a
	// container or pod with the default capabilities (whose seccomp profile then
	// refuses unshare too).
	RootWithoutSysAdmin bool
}

// Cgroups is what the cgroup mounts hold.
type Cgroups struct {
	Checked       bool
	V1            []string // mounted v1 controllers
	V2            bool     // a cgroup2 mount exists
	V2Mount       string
	V2Controllers []string
	Err           string
}

// PathInfo is one folder on the way to the data folder, or the data folder itself.
type PathInfo struct {
	Path     string
	Exists   bool
	Dir      bool
	Mode     uint32 // permission bits and sticky
	UID, GID int
}

// DataFolder is the data folder and every folder above it.
type DataFolder struct {
	Root  string
	Chain []PathInfo // from / down to Root
	// Traversable: every folder above Root lets other users through (search bit);
	// Blocker is the first one that does not.
	Traversable bool
	Blocker     string
}

// TenantList is the tenant's egress list as the proxy would read it.
type TenantList struct {
	Path     string
	Exists   bool
	ReadErr  string
	ParseErr string
	Patterns int
	Mode     uint32
}

// Service is the installed service unit (systemd) or job (launchd).
type Service struct {
	Checked   bool
	Path      string
	Installed bool
	ReadErr   string
	Binary    string            // the binary the unit runs
	DataDir   string            // its --data-dir ("" for the default)
	Listen    map[string]string // flag → address its node listens on (--mcp-listen …)
	Self      string            // this binary
	SelfData  string            // the data folder this doctor checks
	IsDefault bool              // SelfData is the default data folder
}

// Socket is one of the node's sockets in the data folder.
type Socket struct {
	Path     string
	Exists   bool
	IsSocket bool
	Answers  bool
}

// Port is a TCP address the installed service's node listens on.
type Port struct {
	Addr  string
	Flag  string // the flag that names it
	InUse bool   // something listens there now
	Err   string // why it could not be tried
}

// Clock is what the node can tell about the clock without the network.
type Clock struct {
	Now      time.Time
	Synced   int       // 1 synchronised, 0 not, -1 unknown
	NotAfter time.Time // the clock must be past this (this binary's modification time)
}

// Facts is everything Evaluate decides from.
type Facts struct {
	OS       string
	Root     bool
	Backends []Backend
	// BwrapAsRoot is the result of a plain bwrap run as root, without switching to a
	// plugin user ("" works); set only on root nodes with bwrap installed.
	BwrapAsRoot *string
	Userns      Userns
	Cgroups     Cgroups
	Data        DataFolder
	Tenant      TenantList
	Service     Service
	Sockets     []Socket
	Ports       []Port
	Clock       Clock
}

// Evaluate turns facts into the report, one check per need, each miss with its fix.
func Evaluate(f Facts) Report {
	r := Report{OS: f.OS, Root: f.Root, DataDir: f.Data.Root, Backend: "none"}
	for _, b := range f.Backends {
		if b.Works && r.Tier == 0 {
			r.Tier, r.Backend = 1, b.Name
		}
	}
	if f.OS == "linux" {
		r.Checks = append(r.Checks, bwrapChecks(f)...)
		r.Checks = append(r.Checks, usernsCheck(f))
		r.Checks = append(r.Checks, runscCheck(f))
		r.Checks = append(r.Checks, landlockCheck(f))
		r.Checks = append(r.Checks, cgroupCheck(f.Cgroups, f.Root))
	} else {
		for _, b := range f.Backends {
			r.Checks = append(r.Checks, backendCheck(b))
		}
	}
	r.Checks = append(r.Checks, dataChecks(f)...)
	r.Checks = append(r.Checks, tenantCheck(f.Tenant, f.Root))
	r.Checks = append(r.Checks, serviceCheck(f.Service))
	running := false
	for _, s := range f.Sockets {
		r.Checks = append(r.Checks, socketCheck(s))
		running = running || s.Answers
	}
	for _, p := range f.Ports {
		r.Checks = append(r.Checks, portCheck(p, running))
	}
	r.Checks = append(r.Checks, clockCheck(f.Clock))
	tier := Check{Name: "tier", Status: OK, Detail: fmt.Sprintf("tier 1: plugins run sandboxed in %s", r.Backend)}
	switch {
	case r.Tier == 0:
		tier = Check{Name: "tier", Status: Fail,
			Detail: "tier 0: no sandbox backend works here, so every plugin would run as the node's user with no plugin sandbox",
			Fix:    "fix the backend checks above (bwrap is the quickest: install it and allow user namespaces)"}
	case r.Backend == landlock:
		tier = landlockTier(f)
	}
	r.Checks = append(r.Checks, tier)
	return r
}

const landlock = "landlock"

// landlockCheck: Landlock is the tier where bwrap and gVisor cannot run; it
// needs a kernel of 5.13 or later with Landlock among its LSMs.
func landlockCheck(f Facts) Check {
	b, ok := backendByName(f, landlock)
	switch {
	case !ok:
		return Check{Name: landlock, Status: Skip, Detail: "not probed"}
	case !b.Works && b.Version == "":
		return Check{Name: landlock, Status: Warn, Detail: "Landlock is not available: " + b.Err + "; where bwrap cannot run either, plugins would run unsandboxed (tier 0)",
			Fix: fixLandlock}
	case !b.Works:
		return Check{Name: landlock, Status: Fail, Detail: b.Version + " is there, but its probe sandbox fails: " + b.Err, Fix: "the error says what failed"}
	}
	return Check{Name: landlock, Status: OK, Detail: b.Version + ": its probe sandbox works (the tier where user namespaces are refused)"}
}

const fixLandlock = "boot a kernel of 5.13 or later with Landlock among its LSMs (CONFIG_SECURITY_LANDLOCK, lsm=…,landlock)"

// landlockTier is the tier check when the node would run on Landlock: tier 1,
// with what stops bwrap named as the cause and what the tier does not cover.
func landlockTier(f Facts) Check {
	b, _ := backendByName(f, "bwrap")
	ll, _ := backendByName(f, landlock)
	why, fix := UsernsCause(f.Userns, b.Err)
	switch {
	case b.Path == "":
		why, fix = "bwrap is not installed", fixInstallBwrap
	case why == "":
		why = "bwrap's probe sandbox fails: " + b.Err
		fix = "fix what the bwrap checks above name"
	}
	return Check{Name: "tier", Status: Warn,
		Detail: "tier 1 on Landlock: " + why + ", so plugins are confined by Landlock and seccomp without namespaces; not covered: " + strings.Join(ll.Gaps, "; "),
		Fix:    fix + "; bwrap then gives plugins the namespace tier"}
}

func backendByName(f Facts, name string) (Backend, bool) {
	for _, b := range f.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

func backendCheck(b Backend) Check {
	c := Check{Name: b.Name, Status: OK, Detail: strings.TrimSpace(b.Name + " works " + b.Version)}
	if !b.Works {
		c.Status, c.Detail = Fail, b.Name+" does not work: "+b.Err
		c.Fix = "sandbox-exec must be present and able to run a trivial profile"
	}
	return c
}

const (
	fixInstallBwrap = "install bubblewrap: apt-get install bubblewrap (dnf install bubblewrap)"
	fixInstallRunsc = "install a current runsc: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237, then copy it to /usr/local/bin (Debian's 2022 runsc is not fit)"
)

// bwrapChecks: installed, works as root (no user namespace needed), works as an
// unprivileged user (the node's own probe: plugin users on a root node, the node's
// user otherwise), and why not.
func bwrapChecks(f Facts) []Check {
	b, _ := backendByName(f, "bwrap")
	if b.Path == "" {
		return []Check{{Name: "bwrap", Status: Fail, Detail: "bwrap is not installed", Fix: fixInstallBwrap}}
	}
	out := []Check{{Name: "bwrap", Status: OK, Detail: strings.TrimSpace(b.Path + " " + b.Version)}}
	switch {
	case !f.Root:
		out = append(out, Check{Name: "bwrap as root", Status: Skip, Detail: "not checked: the doctor does not run as root"})
	case f.BwrapAsRoot == nil:
	case *f.BwrapAsRoot == "":
		out = append(out, Check{Name: "bwrap as root", Status: OK, Detail: "a plain bwrap sandbox starts as root"})
	default:
		out = append(out, Check{Name: "bwrap as root", Status: Fail, Detail: "bwrap fails even as root: " + *f.BwrapAsRoot,
			Fix: "bwrap cannot create namespaces here at all (a container without CAP_SYS_ADMIN, or a seccomp profile that forbids unshare): run the node on the host or in a privileged container, or use runsc"})
	}
	who := "as node user"
	if f.Root {
		who = "as plugin user"
	}
	c := Check{Name: "bwrap " + who, Status: OK, Detail: "the node's probe sandbox (ls /) works"}
	if !b.Works {
		cause, fix := UsernsCause(f.Userns, b.Err)
		c.Status, c.Detail, c.Fix = Fail, "the node's probe sandbox fails: "+b.Err, fix
		if cause != "" {
			c.Detail = cause + "; the node's probe sandbox fails: " + b.Err
		} else {
			c.Fix = "bwrap is installed but the node's sandbox does not start: the error says what failed (the node needs bubblewrap 0.8 or newer, for --disable-userns)"
		}
	}
	return append(out, c)
}

// Fixes for the user-namespace causes, named by the setting.
const (
	fixMaxUserns   = "allow user namespaces: sysctl -w user.max_user_namespaces=15000, and keep it with a line user.max_user_namespaces=15000 in /etc/sysctl.d/90-oz0-node.conf"
	fixAppArmor    = "give bwrap an AppArmor profile that allows user namespaces: /etc/apparmor.d/bwrap holding the lines `abi <abi/4.0>,` `include <tunables/global>` `profile bwrap /usr/bin/bwrap flags=(unconfined) {` `userns,` `}`, then apparmor_parser -r /etc/apparmor.d/bwrap (or lift the restriction for every program: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"
	fixUsernsClone = "allow unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1, and keep it in /etc/sysctl.d/90-oz0-node.conf"
	fixUsernsOther = "user namespaces are refused here (often a container's seccomp profile or a hardened kernel): run the node on the host, allow unshare(CLONE_NEWUSER) in the container, or use runsc as root"
	fixContainer   = "run the node on the host, or give its container CAP_SYS_ADMIN and a seccomp profile that allows unshare (Kubernetes: a securityContext that adds SYS_ADMIN with an Unconfined or custom seccomp profile)"
)

// UsernsCause names why an unprivileged process cannot create a user namespace,
// from the kernel settings and the error bwrap printed, with the fix. It returns
// "" as the cause when nothing points at user namespaces.
func UsernsCause(u Userns, bwrapErr string) (cause, fix string) {
	e := strings.ToLower(bwrapErr)
	switch {
	case u.MaxUserNamespaces == 0:
		return "user namespaces are switched off: user.max_user_namespaces is 0 (/proc/sys/user/max_user_namespaces)", fixMaxUserns
	case strings.Contains(e, "max_*_namespaces") || strings.Contains(e, "enospc") || strings.Contains(e, "no space left on device"):
		// ENOSPC is the kernel's answer when the user-namespace count is used up.
		return "the kernel refused a new user namespace: the limit user.max_user_namespaces (" + orUnknown(u.MaxUserNamespaces) + ") or the nesting depth is reached", fixMaxUserns
	case u.UnprivilegedUsernsClone == 0:
		return "unprivileged user namespaces are switched off: kernel.unprivileged_userns_clone is 0", fixUsernsClone
	case u.AppArmorRestrict == 1:
		return "Ubuntu's AppArmor restriction is on: kernel.apparmor_restrict_unprivileged_userns is 1, so bwrap may not create a user namespace without an AppArmor profile allowing it", fixAppArmor
	case u.RootWithoutSysAdmin:
		return "the node runs as root without CAP_SYS_ADMIN, as in a container or pod with the default capabilities, whose seccomp profile refuses new namespaces", fixContainer
	case strings.Contains(e, "operation not permitted") || strings.Contains(e, "permission denied") || strings.Contains(e, "no permissions to create"):
		return "creating a user namespace is not permitted here", fixUsernsOther
	}
	return "", ""
}

func orUnknown(n int) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

func usernsCheck(f Facts) Check {
	u := f.Userns
	var vals []string
	add := func(name string, v int) {
		if v >= 0 {
			vals = append(vals, fmt.Sprintf("%s=%d", name, v))
		}
	}
	add("user.max_user_namespaces", u.MaxUserNamespaces)
	add("kernel.unprivileged_userns_clone", u.UnprivilegedUsernsClone)
	add("kernel.apparmor_restrict_unprivileged_userns", u.AppArmorRestrict)
	c := Check{Name: "user namespaces", Status: OK, Detail: "unprivileged user namespaces are allowed (" + strings.Join(vals, ", ") + ")"}
	b, _ := backendByName(f, "bwrap")
	switch cause, fix := UsernsCause(u, ""); {
	case u.MaxUserNamespaces == 0 || u.UnprivilegedUsernsClone == 0:
		c.Status, c.Detail, c.Fix = Fail, cause, fix
	case u.AppArmorRestrict == 1 && b.Works:
		// bwrap works anyway: an AppArmor profile allows it.
		c.Status, c.Detail = OK, "kernel.apparmor_restrict_unprivileged_userns=1, and bwrap may create user namespaces all the same (an AppArmor profile allows it)"
	case u.AppArmorRestrict == 1 && b.Path != "":
		c.Status, c.Detail, c.Fix = Fail, cause, fix
	case u.AppArmorRestrict == 1:
		c.Status, c.Detail, c.Fix = Warn, cause+" (bwrap, once installed, needs that profile)", fix
	case len(vals) == 0:
		c.Status, c.Detail = Skip, "the user-namespace settings could not be read"
	}
	return c
}

func runscCheck(f Facts) Check {
	b, _ := backendByName(f, "gvisor")
	switch {
	case b.Path == "":
		return Check{Name: "runsc", Status: Warn, Detail: "runsc (gVisor) is not installed: plugins that ask for isolation: gvisor are refused", Fix: fixInstallRunsc}
	case !f.Root:
		return Check{Name: "runsc", Status: Skip, Detail: strings.TrimSpace(b.Path+" "+b.Version) + ": not probed, the node runs gVisor only as root"}
	case !b.Works && (f.Userns.MaxUserNamespaces == 0 || strings.Contains(strings.ToLower(b.Err), "no space left on device")):
		// runsc's gofer and sandbox live in namespaces of their own too.
		cause, fix := UsernsCause(f.Userns, b.Err)
		return Check{Name: "runsc", Status: Fail, Detail: cause + "; its probe sandbox (ls /) fails: " + b.Err, Fix: fix}
	case !b.Works:
		return Check{Name: "runsc", Status: Fail, Detail: strings.TrimSpace(b.Path+" "+b.Version) + " is not fit: its probe sandbox (ls /) fails: " + b.Err, Fix: fixInstallRunsc}
	}
	return Check{Name: "runsc", Status: OK, Detail: strings.TrimSpace(b.Path+" "+b.Version) + ": its probe sandbox (ls /) works"}
}

func cgroupCheck(c Cgroups, root bool) Check {
	if !c.Checked {
		return Check{Name: "cgroups", Status: Skip, Detail: "not checked on this OS"}
	}
	if c.Err != "" {
		return Check{Name: "cgroups", Status: Warn, Detail: "the cgroup mounts could not be read: " + c.Err, Fix: "mount cgroups (/sys/fs/cgroup): without them sandboxes get no memory, process or CPU limits"}
	}
	var have []string
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if contains(c.V1, ctl) || contains(c.V2Controllers, ctl) {
			have = append(have, ctl)
		}
	}
	var parts []string
	if len(c.V1) > 0 {
		parts = append(parts, "v1 controllers "+strings.Join(c.V1, ", "))
	}
	if c.V2 {
		ctls := strings.Join(c.V2Controllers, ", ")
		if ctls == "" {
			ctls = "no controllers"
		}
		parts = append(parts, "v2 at "+c.V2Mount+" holding "+ctls)
	}
	if len(parts) == 0 {
		return Check{Name: "cgroups", Status: Warn, Detail: "no cgroup mount", Fix: "mount cgroup2 at /sys/fs/cgroup: without it sandboxes get no memory, process or CPU limits"}
	}
	version := "v1"
	switch {
	case c.V2 && len(c.V1) == 0:
		version = "v2"
	case c.V2:
		version = "hybrid (v1 and v2)"
	}
	detail := "cgroups " + version + ": " + strings.Join(parts, "; ")
	if len(have) < 3 {
		return Check{Name: "cgroups", Status: Warn, Detail: detail + "; missing controllers among memory, pids, cpu: sandboxes go without those limits",
			Fix: "enable the memory, pids and cpu controllers (cgroup v2: in cgroup.subtree_control of the node's parent cgroup)"}
	}
	if !root {
		return Check{Name: "cgroups", Status: Warn, Detail: detail + "; the node is not root, so its sandboxes get no cgroup of their own (no memory, process or CPU limits)",
			Fix: "run the node as root for per-plugin limits"}
	}
	return Check{Name: "cgroups", Status: OK, Detail: detail}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dataChecks: the data folder and the folders above it. Anything another user may
// write on the way lets that user swap the folder; on a root node plugin users need
// every folder above to be traversable, and the data folder itself 0711.
func dataChecks(f Facts) []Check {
	d := f.Data
	var out []Check
	var root PathInfo
	if n := len(d.Chain); n > 0 {
		root = d.Chain[n-1]
	}
	for _, p := range d.Chain {
		if !p.Exists || !p.Dir {
			continue
		}
		if p.Mode&0o002 != 0 && p.Mode&0o1000 == 0 {
			out = append(out, Check{Name: "data folder path", Status: Fail,
				Detail: fmt.Sprintf("%s (mode %04o) is writable by every user without the sticky bit: anyone could replace the data folder below it", p.Path, p.Mode&0o7777),
				Fix:    "chmod o-w " + p.Path + " (or move the data folder)"})
		}
		if p.UID != 0 && f.Root {
			out = append(out, Check{Name: "data folder path", Status: Warn,
				Detail: fmt.Sprintf("%s is owned by uid %d, not root: that user can replace what lies below it", p.Path, p.UID),
				Fix:    "chown root " + p.Path + " (or move the data folder under folders root owns)"})
		}
	}
	switch {
	case !root.Exists:
		out = append(out, Check{Name: "data folder", Status: OK, Detail: d.Root + " does not exist yet: the node creates it at first use"})
	case !root.Dir:
		out = append(out, Check{Name: "data folder", Status: Fail, Detail: d.Root + " is not a folder", Fix: "remove it or choose another --data-dir"})
	case root.Mode&0o022 != 0:
		out = append(out, Check{Name: "data folder", Status: Fail, Detail: fmt.Sprintf("%s (mode %04o) is writable by other users", d.Root, root.Mode&0o777),
			Fix: fmt.Sprintf("chmod %04o %s", wantDataMode(f.Root), d.Root)})
	case f.Root && root.Mode&0o777 != 0o711 || !f.Root && root.Mode&0o077 != 0:
		out = append(out, Check{Name: "data folder", Status: Warn, Detail: fmt.Sprintf("%s has mode %04o; the node sets %04o at start", d.Root, root.Mode&0o777, wantDataMode(f.Root)),
			Fix: fmt.Sprintf("chmod %04o %s (or start the node once)", wantDataMode(f.Root), d.Root)})
	default:
		out = append(out, Check{Name: "data folder", Status: OK, Detail: fmt.Sprintf("%s, mode %04o, owner uid %d", d.Root, root.Mode&0o777, root.UID)})
	}
	switch {
	case f.OS != "linux" || !f.Root:
		out = append(out, Check{Name: "plugin users", Status: Skip, Detail: "per-plugin users exist only on root nodes on Linux; plugins run as the node's user"})
	case d.Traversable:
		out = append(out, Check{Name: "plugin users", Status: OK, Detail: "every folder above the data folder lets other users through: per-plugin users work"})
	default:
		out = append(out, Check{Name: "plugin users", Status: Warn,
			Detail: fmt.Sprintf("the data folder lies under %s, which other users cannot traverse: per-plugin users are off and sandboxed plugins run as the node's user", d.Blocker),
			Fix:    fmt.Sprintf("use a data folder every user can traverse, e.g. --data-dir /var/lib/oz0-node, or chmod o+x %s", d.Blocker)})
	}
	return out
}

func wantDataMode(root bool) uint32 {
	if root {
		return 0o711
	}
	return 0o700
}

func tenantCheck(t TenantList, root bool) Check {
	c := Check{Name: "tenant list", Status: OK}
	switch {
	case !t.Exists:
		c.Status, c.Detail = Warn, t.Path+" does not exist: the proxy lets no plugin reach any host"
		c.Fix = "write the hosts plugins may reach, one a line (host, .suffix, optional :port), to " + t.Path
	case t.ReadErr != "":
		c.Status, c.Detail = Fail, "cannot read "+t.Path+": "+t.ReadErr+": the proxy denies every host"
		c.Fix = "make " + t.Path + " readable by the node"
	case t.ParseErr != "":
		c.Status, c.Detail = Fail, t.ParseErr+": the proxy denies every host while the list is broken"
		c.Fix = "correct that line: one host pattern a line (host, .suffix, optional :port), # for comments"
	default:
		c.Detail = fmt.Sprintf("%s: %d entries", t.Path, t.Patterns)
		if t.Mode&0o002 != 0 {
			c.Status, c.Detail = Fail, fmt.Sprintf("%s (mode %04o) is writable by every user: any user could open egress", t.Path, t.Mode&0o777)
			c.Fix = "chmod 0644 " + t.Path
		}
	}
	return c
}

func serviceCheck(s Service) Check {
	c := Check{Name: "service"}
	switch {
	case !s.Checked:
		c.Status, c.Detail = Skip, "not checked on this OS"
	case !s.Installed:
		c.Status, c.Detail = OK, "no service installed at "+s.Path+" (oz0-node service install installs one)"
	case s.ReadErr != "":
		c.Status, c.Detail = Fail, "cannot read "+s.Path+": "+s.ReadErr
		c.Fix = "reinstall it: oz0-node service install [run flags]"
	case s.Binary != s.Self:
		c.Status, c.Detail = Warn, fmt.Sprintf("%s runs %s, not this binary %s", s.Path, s.Binary, s.Self)
		c.Fix = "if this binary is the node to run, reinstall the service with it: oz0-node service install [run flags]"
	case s.DataDir != s.SelfData && !(s.DataDir == "" && s.IsDefault):
		c.Status, c.Detail = Warn, fmt.Sprintf("%s runs this binary on data folder %s, not %s (checked here)", s.Path, orDefault(s.DataDir), s.SelfData)
		c.Fix = "run the doctor with --data-dir " + orDefault(s.DataDir) + " to check the service's node"
	default:
		c.Status, c.Detail = OK, s.Path+" runs this binary on this data folder"
	}
	return c
}

func orDefault(s string) string {
	if s == "" {
		return "(the default)"
	}
	return s
}

func socketCheck(s Socket) Check {
	c := Check{Name: "socket"}
	switch {
	case !s.Exists:
		c.Status, c.Detail = OK, s.Path+" is free"
	case !s.IsSocket:
		c.Status, c.Detail = Fail, s.Path+" exists and is not a socket: the node cannot listen there"
		c.Fix = "remove " + s.Path + " (nothing of the node's lives there)"
	case s.Answers:
		c.Status, c.Detail = OK, s.Path+" answers: a node runs on this data folder (a second one would refuse to start)"
	default:
		c.Status, c.Detail = OK, s.Path+" is left from a node that stopped; the next node replaces it"
	}
	return c
}

func portCheck(p Port, nodeRunning bool) Check {
	c := Check{Name: "port", Status: OK}
	switch {
	case p.Err != "":
		c.Status, c.Detail = Warn, fmt.Sprintf("%s %s could not be tried: %s", p.Flag, p.Addr, p.Err)
	case p.InUse && nodeRunning:
		c.Detail = fmt.Sprintf("%s %s is in use, by the node running on this data folder", p.Flag, p.Addr)
	case p.InUse:
		c.Status, c.Detail = Fail, fmt.Sprintf("%s %s is in use by another program: the service's node cannot listen there", p.Flag, p.Addr)
		c.Fix = fmt.Sprintf("stop what listens on %s (ss -ltnp) or reinstall the service with another %s", p.Addr, p.Flag)
	default:
		c.Detail = fmt.Sprintf("%s %s is free", p.Flag, p.Addr)
	}
	return c
}

func clockCheck(c Clock) Check {
	out := Check{Name: "clock", Status: OK, Detail: "the clock reads " + c.Now.UTC().Format(time.RFC3339)}
	switch {
	case !c.NotAfter.IsZero() && c.Now.Before(c.NotAfter):
		out.Status = Fail
		out.Detail += ", earlier than this binary was built (" + c.NotAfter.UTC().Format(time.RFC3339) + "): TLS certificates, the ledger and logs would carry wrong times"
		out.Fix = "set the clock (timedatectl set-ntp true, or chronyd/ntpd)"
	case c.Synced == 0:
		out.Status = Warn
		out.Detail += "; the kernel says it is not synchronised"
		out.Fix = "synchronise the clock (timedatectl set-ntp true, or chronyd/ntpd)"
	case c.Synced == 1:
		out.Detail += ", synchronised"
	}
	return out
}

// Text renders the report for a terminal: one line per check, its fix below it.
func (r Report) Text() string {
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-4s %-22s %s\n", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
		if c.Fix != "" && (c.Status == Fail || c.Status == Warn) {
			fmt.Fprintf(&b, "     %-22s fix: %s\n", "", c.Fix)
		}
	}
	return b.String()
}
