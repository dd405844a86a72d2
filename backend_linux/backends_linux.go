package backendlinux

import (
	"bytes"
	"context"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Backends are the Linux sandbox backends in the order `--backend auto` prefers them
// (bwrap first: it starts in milliseconds and has namespaces; Landlock last: it
// has none, and is the tier where user namespaces are refused).
func Backends() []sandbox.Backend {
	return []sandbox.Backend{newBwrap(), newGVisor(), newLandlock()}
}

// New returns a Linux backend by name: bwrap, gvisor or landlock.
func New(name string) (sandbox.Backend, error) {
	switch name {
	case policy.BackendBwrap:
		return newBwrap(), nil
	case policy.BackendGVisor:
		return newGVisor(), nil
	case policy.BackendLandlock:
		return newLandlock(), nil
	}
	return nil, fmt.Errorf("sandbox backend %q: %w (Linux has bwrap, gvisor and landlock)", name, sandbox.ErrUnavailable)
}

func findTool(name string) string {
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func newBwrap() *Bwrap   { return &Bwrap{Path: findTool("bwrap")} }
func newGVisor() *GVisor { return &GVisor{Path: findTool("runsc")} }

// probeUID is the user a probe sandbox runs as on a root node, so the probe takes
// the same uid switch as every plugin.
var probeUID = policy.PluginUID(policy.ProbeUser)

// probeSpec is a trivial sandbox: the system allowlist, no plugin, `ls /`. It is
// built like every other spec: own network, limits, seccomp.
func probeSpec(dataDir string) *sandbox.Spec {
	s := &sandbox.Spec{
		Plugin: "oz0-probe", Kind: "probe",
		Argv:     []string{"/bin/ls", "/"},
		Env:      []string{"PATH=" + sandbox.MinimalPath, "LANG=C.UTF-8"},
		Dir:      "/",
		System:   append([]sandbox.Mount(nil), sandbox.SystemMounts...),
		Network:  policy.NetProxy,
		Limits:   sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUPercent: 100, OpenFiles: 256},
		Seccomp:  "default",
		Hostname: "oz0-probe",
		DataDir:  dataDir,
	}
	if os.Geteuid() == 0 {
		s.UID, s.GID, s.PluginUser = probeUID, probeUID, true
	}
	return s
}

// runProbe runs the probe sandbox and checks that `ls /` listed the root it was given.
func runProbe(ctx context.Context, b sandbox.Backend, s *sandbox.Spec) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	p, err := b.Command(ctx, s)
	if err != nil {
		return err
	}
	defer p.Cleanup()
	var out, errb bytes.Buffer
	p.Cmd.Stdout, p.Cmd.Stderr = &out, &errb
	if err := p.Cmd.Run(); err != nil {
		return fmt.Errorf("probe sandbox (ls /): %w: %s", err, strings.TrimSpace(errb.String()))
	}
	if !strings.Contains(out.String(), "usr") {
		return fmt.Errorf("probe sandbox (ls /) listed %q, not the system allowlist", strings.TrimSpace(out.String()))
	}
	return nil
}

// Probe implements sandbox.Backend: it runs `ls /` in a real sandbox.
func (b *Bwrap) Probe(ctx context.Context) sandbox.Probe {
	pr := sandbox.Probe{Name: b.Name()}
	if b.Path == "" {
		pr.Err = fmt.Errorf("bwrap: not installed: %w", sandbox.ErrUnavailable)
		return pr
	}
	if out, err := exec.CommandContext(ctx, b.Path, "--version").Output(); err == nil {
		pr.Version = strings.TrimSpace(string(out))
	}
	if err := runProbe(ctx, b, probeSpec("")); err != nil {
		pr.Err = fmt.Errorf("bwrap %s: %w (%w)", b.Path, err, sandbox.ErrUnavailable)
		if strings.Contains(err.Error(), "Operation not permitted") || strings.Contains(err.Error(), "Permission denied") {
			pr.Err = fmt.Errorf("%w; unprivileged user namespaces may be blocked (e.g. Ubuntu's AppArmor restriction)", pr.Err)
		}
		return pr
	}
	pr.Works = true
	return pr
}

// Probe implements sandbox.Backend: it runs `ls /` in a real gVisor sandbox, so a
// runsc too old for this kernel (statx failing) is reported, not trusted.
func (g *GVisor) Probe(ctx context.Context) sandbox.Probe {
	pr := sandbox.Probe{Name: g.Name()}
	if g.Path == "" {
		pr.Err = fmt.Errorf("runsc: not installed: %w", sandbox.ErrUnavailable)
		return pr
	}
	if os.Geteuid() != 0 {
		pr.Err = fmt.Errorf("runsc: the node is not root: %w", sandbox.ErrUnavailable)
		return pr
	}
	if out, err := exec.CommandContext(ctx, g.Path, "--version").Output(); err == nil {
		pr.Version = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	tmp, err := os.MkdirTemp("", "oz0-probe-")
	if err != nil {
		pr.Err = fmt.Errorf("runsc probe: %w", err)
		return pr
	}
	defer os.RemoveAll(tmp)
	defer unmountNullNetns(filepath.Join(tmp, "state"))
	probe := *g
	probe.StateDir = filepath.Join(tmp, "state")
	s := probeSpec(tmp)
	if err := runProbe(ctx, &probe, s); err != nil {
		pr.Err = fmt.Errorf("runsc %s: %w (%w)", g.Path, err, sandbox.ErrUnavailable)
		return pr
	}
	pr.Works = true
	return pr
}
