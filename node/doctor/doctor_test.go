package doctor

import (
	"strings"
	"testing"
	"time"
)

// base is a healthy Linux root node: bwrap and runsc work, user namespaces are
// allowed, cgroups hold every controller, the data folder is /var/lib/oz0-node 0711.
func base() Facts {
	ok := ""
	return Facts{
		OS: "linux", Root: true,
		Backends: []Backend{
			{Name: "bwrap", Path: "/usr/bin/bwrap", Version: "bubblewrap 0.8.0", Works: true},
			{Name: "gvisor", Path: "/usr/local/bin/runsc", Version: "runsc version release-20260901", Works: true},
			{Name: "landlock", Version: "Landlock ABI 7", Works: true, Gaps: []string{"Landlock tier, no PID namespace: the tool sees every host process"}},
		},
		BwrapAsRoot: &ok,
		Userns:      Userns{MaxUserNamespaces: 63000, AppArmorRestrict: -1, UnprivilegedUsernsClone: -1},
		Cgroups:     Cgroups{Checked: true, V2: true, V2Mount: "/sys/fs/cgroup", V2Controllers: []string{"cpu", "memory", "pids"}},
		Data: DataFolder{Root: "/var/lib/oz0-node", Traversable: true, Chain: []PathInfo{
			{Path: "/", Exists: true, Dir: true, Mode: 0o755},
			{Path: "/var", Exists: true, Dir: true, Mode: 0o755},
			{Path: "/var/lib", Exists: true, Dir: true, Mode: 0o755},
			{Path: "/var/lib/oz0-node", Exists: true, Dir: true, Mode: 0o711},
		}},
		Tenant:  TenantList{Path: "/var/lib/oz0-node/tenant/egress", Exists: true, Patterns: 2, Mode: 0o644},
		Service: Service{Checked: true, Path: "/etc/systemd/system/oz0-node.service", Installed: true, Binary: "/usr/bin/oz0-node", Self: "/usr/bin/oz0-node", SelfData: "/var/lib/oz0-node", IsDefault: true},
		Sockets: []Socket{{Path: "/var/lib/oz0-node/run/control.sock"}},
		Clock:   Clock{Now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Synced: 1, NotAfter: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
	}
}

func check(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

func TestHealthyNode(t *testing.T) {
	r := Evaluate(base())
	if r.Tier != 1 || r.Backend != "bwrap" {
		t.Errorf("tier %d backend %s, want 1 bwrap", r.Tier, r.Backend)
	}
	for _, c := range r.Checks {
		if c.Status != OK {
			t.Errorf("a healthy node has a %s check: %+v", c.Status, c)
		}
	}
}

func bwrapFails(f Facts, err string) Facts {
	f.Backends[0].Works, f.Backends[0].Err = false, err
	f.Backends[1].Works, f.Backends[1].Err = false, "runsc: not installed"
	f.Backends[1].Path = ""
	return f
}

// TestUsernsCauses: each way the kernel refuses an unprivileged user namespace is
// named by its setting, with that setting's fix, and the node is on the Landlock
// tier — its tier check says why, with the fix and what the tier does not cover —
// or at tier 0 where Landlock is missing too.
func TestUsernsCauses(t *testing.T) {
	const uidMap = "bwrap: setting up uid map: Permission denied"
	for _, c := range []struct {
		name   string
		userns Userns
		err    string
		cause  string
		fix    string
	}{
		{"max_user_namespaces 0", Userns{0, -1, -1, false}, "bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)", "user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces=15000"},
		{"count exhausted (setting unreadable)", Userns{-1, -1, -1, false}, "bwrap: Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC)", "limit user.max_user_namespaces (unknown) or the nesting depth is reached", "sysctl -w user.max_user_namespaces"},
		{"Ubuntu AppArmor restriction", Userns{63000, 1, -1, false}, uidMap, "kernel.apparmor_restrict_unprivileged_userns is 1", "apparmor_parser -r /etc/apparmor.d/bwrap"},
		{"Debian userns_clone", Userns{63000, -1, 0, false}, "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.", "kernel.unprivileged_userns_clone is 0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"container seccomp", Userns{63000, -1, -1, false}, "bwrap: Creating new namespace failed: Operation not permitted", "not permitted here", "allow unshare(CLONE_NEWUSER)"},
		{"root in a container without CAP_SYS_ADMIN", Userns{63000, -1, -1, true}, "bwrap: Creating new namespace failed: Operation not permitted", "root without CAP_SYS_ADMIN", "give its container CAP_SYS_ADMIN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := bwrapFails(base(), c.err)
			f.Userns = c.userns
			r := Evaluate(f)
			bw := check(t, r, "bwrap as plugin user")
			if bw.Status != Fail || !strings.Contains(bw.Detail, c.cause) || !strings.Contains(bw.Detail, c.err) || !strings.Contains(bw.Fix, c.fix) {
				t.Errorf("bwrap check:\n%+v\nwant the cause %q, bwrap's error and the fix %q", bw, c.cause, c.fix)
			}
			tier := check(t, r, "tier")
			if r.Tier != 1 || r.Backend != "landlock" || tier.Status != Warn || !strings.Contains(tier.Detail, "tier 1 on Landlock: "+bw.Detail[:20]) ||
				!strings.Contains(tier.Detail, "no PID namespace") || !strings.Contains(tier.Fix, c.fix) {
				t.Errorf("tier %d on %s where only Landlock works; tier check %+v, want the cause, what the tier does not cover and the fix", r.Tier, r.Backend, tier)
			}
			f.Backends[2] = Backend{Name: "landlock", Err: "landlock: not available"}
			if r := Evaluate(f); r.Tier != 0 || check(t, r, "tier").Status != Fail || check(t, r, "landlock").Status != Warn {
				t.Errorf("tier %d with no backend working: %+v", r.Tier, check(t, r, "landlock"))
			}
			if strings.Contains(c.name, "container") || strings.Contains(c.name, "exhausted") {
				return // the kernel settings allow it: the user-namespace check has nothing to blame
			}
			if ns := check(t, r, "user namespaces"); ns.Status != Fail || !strings.Contains(ns.Fix, c.fix) {
				t.Errorf("user-namespace check: %+v", ns)
			}
		})
	}
}

// TestAppArmorWithProfile: the AppArmor restriction is on, but bwrap works (a
// profile allows it): nothing to fix.
func TestAppArmorWithProfile(t *testing.T) {
	f := base()
	f.Userns.AppArmorRestrict = 1
	if c := check(t, Evaluate(f), "user namespaces"); c.Status != OK || !strings.Contains(c.Detail, "apparmor_restrict_unprivileged_userns=1") {
		t.Errorf("%+v", c)
	}
}

func TestBackends(t *testing.T) {
	f := base()
	f.Backends[0] = Backend{Name: "bwrap", Err: "bwrap: not installed"}
	r := Evaluate(f)
	if c := check(t, r, "bwrap"); c.Status != Fail || !strings.Contains(c.Fix, "apt-get install bubblewrap") {
		t.Errorf("bwrap missing: %+v", c)
	}
	if r.Tier != 1 || r.Backend != "gvisor" {
		t.Errorf("with runsc working the node is at tier 1 on gvisor, got %d %s", r.Tier, r.Backend)
	}
	f.Backends[1].Works, f.Backends[1].Err = false, "probe sandbox (ls /): exit status 2: ls: cannot access '/': Invalid argument"
	r = Evaluate(f)
	if c := check(t, r, "runsc"); c.Status != Fail || !strings.Contains(c.Detail, "not fit") || !strings.Contains(c.Fix, "go install gvisor.dev/gvisor/runsc@") {
		t.Errorf("unfit runsc: %+v", c)
	}
	if r.Tier != 1 || r.Backend != "landlock" {
		t.Errorf("tier %d on %s, want the Landlock tier", r.Tier, r.Backend)
	}
	if c := check(t, r, "tier"); c.Status != Warn || !strings.Contains(c.Detail, "bwrap is not installed") || !strings.Contains(c.Fix, "apt-get install bubblewrap") {
		t.Errorf("tier on Landlock with bwrap missing: %+v", c)
	}
	f.Backends[2] = Backend{Name: "landlock", Err: "landlock: not available (a kernel before 5.13)"}
	r = Evaluate(f)
	if c := check(t, r, "landlock"); r.Tier != 0 || c.Status != Warn || !strings.Contains(c.Fix, "lsm=") {
		t.Errorf("tier %d; landlock check %+v", r.Tier, c)
	}
	root := "bwrap: Creating new namespace failed: Operation not permitted"
	f = base()
	f.BwrapAsRoot = &root
	if c := check(t, Evaluate(f), "bwrap as root"); c.Status != Fail || !strings.Contains(c.Fix, "privileged container") {
		t.Errorf("bwrap failing as root: %+v", c)
	}
}

func TestCgroups(t *testing.T) {
	f := base()
	f.Cgroups = Cgroups{Checked: true, V1: []string{"cpu", "memory", "pids"}, V2: true, V2Mount: "/sys/fs/cgroup/unified", V2Controllers: []string{"hugetlb"}}
	if c := check(t, Evaluate(f), "cgroups"); c.Status != OK || !strings.Contains(c.Detail, "hybrid") {
		t.Errorf("%+v", c)
	}
	f.Cgroups = Cgroups{Checked: true, V2: true, V2Mount: "/sys/fs/cgroup", V2Controllers: []string{"cpu"}}
	if c := check(t, Evaluate(f), "cgroups"); c.Status != Warn || !strings.Contains(c.Detail, "cgroups v2") {
		t.Errorf("%+v", c)
	}
}

func TestDataFolder(t *testing.T) {
	f := base()
	f.Data.Chain[2].Mode = 0o777 // /var/lib writable by all, no sticky bit
	f.Data.Chain[3].Mode = 0o755
	r := Evaluate(f)
	var path, dir Check
	for _, c := range r.Checks {
		switch c.Name {
		case "data folder path":
			path = c
		case "data folder":
			dir = c
		}
	}
	if path.Status != Fail || !strings.Contains(path.Detail, "/var/lib (mode 0777)") || path.Fix != "chmod o-w /var/lib (or move the data folder)" {
		t.Errorf("world-writable folder above: %+v", path)
	}
	if dir.Status != Warn || !strings.Contains(dir.Fix, "chmod 0711 /var/lib/oz0-node") {
		t.Errorf("data folder 0755 on a root node: %+v", dir)
	}

	f = base()
	f.Data = DataFolder{Root: "/root/oz0", Blocker: "/root", Chain: []PathInfo{
		{Path: "/", Exists: true, Dir: true, Mode: 0o755}, {Path: "/root", Exists: true, Dir: true, Mode: 0o700}, {Path: "/root/oz0", Exists: true, Dir: true, Mode: 0o711}}}
	if c := check(t, Evaluate(f), "plugin users"); c.Status != Warn || !strings.Contains(c.Fix, "chmod o+x /root") {
		t.Errorf("/root blocks plugin users: %+v", c)
	}
	f.Root = false
	f.Data.Chain[2].Mode = 0o700
	if c := check(t, Evaluate(f), "plugin users"); c.Status != Skip {
		t.Errorf("plugin users on a non-root node: %+v", c)
	}
}

func TestTenantServiceSocketsClock(t *testing.T) {
	f := base()
	f.Tenant.Mode = 0o666
	f.Service.Binary = "/opt/old/oz0-node"
	f.Sockets = []Socket{{Path: "/var/lib/oz0-node/run/control.sock", Exists: true}}
	f.Clock.Now = f.Clock.NotAfter.Add(-time.Hour)
	r := Evaluate(f)
	for name, want := range map[string]string{
		"tenant list": "chmod 0644",
		"service":     "oz0-node service install",
		"socket":      "remove /var/lib/oz0-node/run/control.sock",
		"clock":       "set the clock",
	} {
		if c := check(t, r, name); c.Status == OK || !strings.Contains(c.Fix, want) {
			t.Errorf("%s: %+v, want a fix with %q", name, c, want)
		}
	}
	if r.Tier != 1 {
		t.Errorf("these misses do not stop tier 1, got %d", r.Tier)
	}
	text := r.Text()
	if !strings.Contains(text, "FAIL tenant list") || !strings.Contains(text, "fix: chmod 0644") || strings.Contains(text, "OK   tier") == false {
		t.Errorf("text:\n%s", text)
	}

	f = base()
	f.Service.DataDir, f.Service.IsDefault = "/srv/oz0", true
	if c := check(t, Evaluate(f), "service"); c.Status != Warn || !strings.Contains(c.Fix, "--data-dir /srv/oz0") {
		t.Errorf("service on another data folder: %+v", c)
	}
}

func TestCgroupsOnAUserNode(t *testing.T) {
	f := base()
	f.Root = false
	if c := check(t, Evaluate(f), "cgroups"); c.Status != Warn || !strings.Contains(c.Detail, "not root") {
		t.Errorf("%+v", c)
	}
}

func TestAppArmorWithoutBwrap(t *testing.T) {
	f := base()
	f.Userns.AppArmorRestrict = 1
	f.Backends[0] = Backend{Name: "bwrap", Err: "bwrap: not installed"}
	if c := check(t, Evaluate(f), "user namespaces"); c.Status != Warn || !strings.Contains(c.Fix, "apparmor_parser -r") {
		t.Errorf("%+v", c)
	}
}
