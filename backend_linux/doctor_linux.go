package backendlinux

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/doctor"
)

// DoctorUserns reads the kernel settings that decide whether an unprivileged
// process may create a user namespace (-1 where a setting does not exist here).
func DoctorUserns() doctor.Userns {
	return doctor.Userns{
		MaxUserNamespaces:       readSysctlInt("/proc/sys/user/max_user_namespaces"),
		AppArmorRestrict:        readSysctlInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
		UnprivilegedUsernsClone: readSysctlInt("/proc/sys/kernel/unprivileged_userns_clone"),
		RootWithoutSysAdmin:     os.Geteuid() == 0 && !hasCapability(unix.CAP_SYS_ADMIN),
	}
}

// hasCapability reports whether this process holds capability c in its effective
// set.
func hasCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return true // unknown: name no container
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

func readSysctlInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// DoctorCgroups says which cgroup controllers are mounted, v1 and v2.
func DoctorCgroups() doctor.Cgroups {
	c := doctor.Cgroups{Checked: true}
	mounts, err := cgroupMounts()
	if err != nil {
		c.Err = err.Error()
		return c
	}
	for ctl := range mounts {
		if ctl != "" {
			c.V1 = append(c.V1, ctl)
		}
	}
	sort.Strings(c.V1)
	if m, ok := mounts[""]; ok {
		c.V2, c.V2Mount = true, m
		if b, err := os.ReadFile(filepath.Join(m, "cgroup.controllers")); err == nil {
			c.V2Controllers = strings.Fields(string(b))
		}
	}
	return c
}

// DoctorBwrapAsRoot runs a plain bwrap sandbox as the current (root) user, without
// the switch to a plugin user: it tells "bwrap cannot work here at all" from
// "unprivileged users cannot create user namespaces". nil when bwrap is missing or
// the caller is not root.
func DoctorBwrapAsRoot(ctx context.Context) *string {
	path := findTool("bwrap")
	if path == "" || os.Geteuid() != 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true")
	cmd.Env = []string{}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	res := ""
	if err := cmd.Run(); err != nil {
		res = strings.TrimSpace(err.Error() + ": " + errb.String())
	}
	return &res
}

// DoctorClockSynced asks the kernel whether the clock is synchronised: 1 yes, 0 no,
// -1 unknown.
func DoctorClockSynced() int {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	switch {
	case err != nil:
		return -1
	case state == unix.TIME_ERROR || tx.Status&unix.STA_UNSYNC != 0:
		return 0
	}
	return 1
}

// DoctorToolPath is the program a backend runs (bwrap, runsc), "" when it is not
// installed where the node looks for it.
func DoctorToolPath(backend string) string {
	switch backend {
	case "bwrap":
		return findTool("bwrap")
	case "gvisor":
		return findTool("runsc")
	}
	return ""
}
