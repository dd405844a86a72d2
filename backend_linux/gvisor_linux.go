package backendlinux

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// GVisor runs sandboxes with gVisor's runsc: a fresh OCI bundle per start, `runsc
// run` (never `runsc do`, which passes the host environment through), a per-node
// state folder, and the bundle and state removed on Cleanup.
type GVisor struct {
	// Path is the runsc executable.
	Path string
	// StateDir overrides runsc's --root; by default it is <data>/run/runsc.
	StateDir string
}

// Name implements sandbox.Backend.
func (g *GVisor) Name() string { return policy.BackendGVisor }

// Render implements sandbox.Backend.
func (g *GVisor) Render(s *sandbox.Spec) (string, error) { return renderOCI(s, lstatInspect) }

func (g *GVisor) stateDir(s *sandbox.Spec) string {
	if g.StateDir != "" {
		return g.StateDir
	}
	return filepath.Join(s.DataDir, "run", "runsc")
}

// runscFlags are the global flags of every runsc call for a Spec.
func (g *GVisor) runscFlags(s *sandbox.Spec) []string {
	f := []string{"--root", g.stateDir(s),
		// No overlay: a write to a read-only bind must fail, not land in memory and
		// vanish.
		"--overlay2=none",
		"--oci-seccomp"}
	// Only a network the policy names as the host's is shared; every other one
	// (the proxy's, an isolated hook's) is gVisor's own with nothing in it.
	if hostNetwork(s.Network) {
		f = append(f, "--network=host")
	} else {
		f = append(f, "--network=none")
	}
	if s.Proxy != nil && s.Proxy.SocketDir != "" {
		// The proxy socket folder is the only host socket bound in.
		f = append(f, "--host-uds=open")
	}
	return f
}

// Command implements sandbox.Backend.
func (g *GVisor) Command(ctx context.Context, s *sandbox.Spec) (proc *sandbox.Process, err error) {
	if err := prepare(s); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", s.Plugin, err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	id := "oz0-" + cgroupName(s) + "-" + hex.EncodeToString(rnd[:])
	state := g.stateDir(s)
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("plugin %s: runsc state folder: %w", s.Plugin, err)
	}
	bundleRoot := filepath.Join(filepath.Dir(state), "runsc-bundles")
	if err := os.MkdirAll(bundleRoot, 0o700); err != nil {
		return nil, fmt.Errorf("plugin %s: bundle folder: %w", s.Plugin, err)
	}
	bundle := filepath.Join(bundleRoot, id)
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return nil, fmt.Errorf("plugin %s: create bundle %s: %w", s.Plugin, bundle, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(bundle)
		}
	}()
	if err := writeBundle(s, bundle, id); err != nil {
		return nil, err
	}
	reached(stepCgroup) // the bundle (runsc makes its cgroup as it starts)
	unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	return g.runscRun(ctx, s, state, bundle, id), nil
}

// writeBundle writes the OCI bundle of a start into the folder bundle: its
// rootfs skeleton and config.json, after checking every bind source.
func writeBundle(s *sandbox.Spec, bundle, id string) error {
	// A relative cgroupsPath nests the sandbox's group under the node's own group in
	// every controller.
	b, err := ociConfig(s, lstatInspect, ociOptions{CgroupsPath: id})
	if err != nil {
		return err
	}
	// Check the bind sources the way bwrap opens them: no symlink anywhere. Their
	// parents are root-owned, so a plugin cannot swap them before runsc's gofer
	// opens them.
	for _, m := range b.Spec.Mounts {
		if m.Type != "bind" {
			continue
		}
		f, err := openNoFollow(m.Source)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", s.Plugin, err)
		}
		f.Close()
	}
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return fmt.Errorf("plugin %s: create rootfs: %w", s.Plugin, err)
	}
	// Modes are set explicitly: the node runs under umask 077, and the sandbox's
	// user must traverse the skeleton to reach its mounts.
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return fmt.Errorf("plugin %s: chmod rootfs: %w", s.Plugin, err)
	}
	for _, e := range b.Skel {
		p := filepath.Join(rootfs, e.Path)
		switch {
		case e.Symlink != "":
			err = os.Symlink(e.Symlink, p)
		case e.Dir:
			err = os.Mkdir(p, 0o755)
			if errors.Is(err, os.ErrExist) {
				err = nil
			}
			if err == nil {
				err = os.Chmod(p, 0o755)
			}
		default:
			var f *os.File
			f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				err = f.Chmod(0o644)
				if err == nil && e.Data != nil {
					_, err = f.Write(e.Data)
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			return fmt.Errorf("plugin %s: rootfs skeleton %s: %w", s.Plugin, e.Path, err)
		}
	}
	cfg, err := json.MarshalIndent(b.Spec, "", "  ")
	if err != nil {
		return fmt.Errorf("plugin %s: encode config.json: %w", s.Plugin, err)
	}
	// The config holds the tool's environment: private to the node.
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
		return fmt.Errorf("plugin %s: write config.json: %w", s.Plugin, err)
	}
	return nil
}

// runscRun is `runsc run` of the written bundle, and its Cleanup: kill, delete the
// container unless runsc did, remove the bundle.
func (g *GVisor) runscRun(ctx context.Context, s *sandbox.Spec, state, bundle, id string) *sandbox.Process {
	flags := g.runscFlags(s)
	args := append(append([]string{}, flags...), "run", "--bundle", bundle, id)
	cmd := exec.CommandContext(ctx, g.Path, args...)
	cmd.Env = []string{} // runsc gets nothing of the node's environment
	cmd.Dir = bundle
	// runsc run in attached mode kills the sandbox when it dies; it dies with the node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	holdNullNetns(state)
	var release sync.Once
	cleanup := func() error {
		defer release.Do(func() { releaseNullNetns(state) })
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		if !runscDone(cmd, state, id) {
			del := exec.Command(g.Path, append(append([]string{}, flags...), "delete", "--force", id)...)
			del.Env = []string{}
			if out, derr := del.CombinedOutput(); derr != nil {
				// Also the answer when the container never started.
				slog.Debug("runsc delete", "id", id, "out", string(out), "err", derr)
			}
		}
		rerr := os.RemoveAll(bundle)
		if rerr != nil {
			return fmt.Errorf("plugin %s: remove bundle %s: %w", s.Plugin, bundle, rerr)
		}
		return nil
	}
	return &sandbox.Process{Cmd: cmd, Cleanup: cleanup}
}

// runscDone reports whether runsc run has ended and left nothing of container id
// behind: it was reaped, and no file in the state folder names the id (its state,
// lock and socket). Attached runsc run deletes its container as it exits, and
// runsc delete finds a container only by those files, so running it then would
// only cost another runsc process (tens of milliseconds) at every stop.
func runscDone(cmd *exec.Cmd, state, id string) bool {
	if cmd.ProcessState == nil {
		return false // not reaped: still running, or dying with a file half made
	}
	left, err := filepath.Glob(filepath.Join(state, "*"+id+"*"))
	return err == nil && len(left) == 0
}
