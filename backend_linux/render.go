package backendlinux

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Render shows, without running anything, what backend name ("bwrap", "gvisor" or
// "landlock") would build for s: bwrap's command line with the argv it reads from
// --args and the descriptors it is handed, gVisor's config.json, or the Landlock
// runner's rules with what the tier does not cover on this kernel. Bind sources are
// looked at on this machine (lstat) to decide between a bind and a recreated system
// symlink.
func Render(name string, s *sandbox.Spec) (string, error) {
	// The home is created at the first start; showing must not create it.
	inspect := func(p string) PathInfo {
		info := lstatInspect(p)
		if info.Missing && p == s.Home {
			return PathInfo{}
		}
		return info
	}
	switch name {
	case policy.BackendBwrap:
		return renderBwrap(s, inspect)
	case policy.BackendGVisor:
		return renderOCI(s, inspect)
	case policy.BackendLandlock:
		return renderLandlock(s, inspect, LandlockABI(), os.Geteuid() == 0)
	}
	return "", fmt.Errorf("render sandbox: backend %q is not a Linux backend (bwrap, gvisor or landlock)", name)
}

// lstatInspect looks at a bind source without following it.
func lstatInspect(p string) PathInfo {
	fi, err := os.Lstat(p)
	if err != nil {
		return PathInfo{Missing: true}
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		t, err := os.Readlink(p)
		if err != nil {
			return PathInfo{Missing: true}
		}
		return PathInfo{Symlink: t}
	}
	return PathInfo{File: !fi.IsDir()}
}

func renderBwrap(s *sandbox.Spec, inspect Inspect) (string, error) {
	p, err := buildBwrap(s, inspect)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# bwrap, started with an empty environment")
	if s.PluginUser {
		fmt.Fprintf(&b, " as uid %d gid %d (no supplementary groups)", s.UID, s.GID)
	}
	b.WriteString("\nbwrap --args " + strconv.Itoa(fdArgs) + " --")
	for _, a := range p.Command {
		b.WriteString(" " + quote(a))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "# fd %d: seccomp filter (default profile)\n", fdSeccomp)
	fmt.Fprintf(&b, "# fd %d: info (sandbox pid to the node), fd %d: gate (the tool starts once cgroup and rlimits are set)\n", fdInfo, fdGate)
	fmt.Fprintf(&b, "# fd %d: the tool's environment, exported by the gate only at its exec of the tool:\n", fdEnv)
	for _, l := range strings.Split(strings.TrimSuffix(string(p.Env), "\n"), "\n") {
		if l != "" {
			b.WriteString("#   " + l + "\n")
		}
	}
	for i, src := range p.Sources {
		how := "O_PATH, no symlinks followed"
		if src.Copy {
			how = "read and copied in, no symlinks followed"
		}
		if src.Data != nil {
			how = "written by the node"
		}
		fmt.Fprintf(&b, "# fd %d: %s (%s)\n", fdFirstBind+i, src.Path, how)
	}
	fmt.Fprintf(&b, "# limits: %s\n", limitsText(s))
	fmt.Fprintf(&b, "# options read from fd %d:\n", fdArgs)
	for i := 0; i < len(p.Args); i++ {
		line := quote(p.Args[i])
		// Keep an option with its operands on one line.
		n := operands[p.Args[i]]
		for j := 0; j < n && i+1 < len(p.Args); j++ {
			i++
			line += " " + quote(p.Args[i])
		}
		b.WriteString(line + "\n")
	}
	return b.String(), nil
}

var operands = map[string]int{
	"--hostname": 1, "--proc": 1, "--dev": 1, "--tmpfs": 1, "--symlink": 2,
	"--bind-fd": 2, "--ro-bind-fd": 2, "--remount-ro": 1, "--chdir": 1, "--seccomp": 1,
	"--info-fd": 1, "--perms": 1, "--file": 2, "--setenv": 2, "--cap-drop": 1,
}

func limitsText(s *sandbox.Spec) string {
	l := s.Limits
	parts := []string{
		"memory " + strconv.FormatInt(l.MemoryBytes, 10),
		"pids " + strconv.Itoa(l.Pids),
		"cpu " + strconv.Itoa(l.CPUPercent) + "%",
		"nofile " + strconv.Itoa(l.OpenFiles),
		"fsize " + strconv.FormatInt(l.FileSizeBytes, 10),
		"core 0",
	}
	if s.PluginUser && l.Procs > 0 {
		parts = append(parts, "nproc "+strconv.Itoa(l.Procs)+" (per plugin uid)")
	}
	return strings.Join(parts, ", ")
}

func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func renderOCI(s *sandbox.Spec, inspect Inspect) (string, error) {
	c, err := ociConfig(s, inspect, ociOptions{})
	if err != nil {
		return "", err
	}
	out, err := json.MarshalIndent(c.Spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("render OCI config for plugin %s: %w", s.Plugin, err)
	}
	return string(out) + "\n", nil
}
