package service

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	ks "github.com/kardianos/service"

	"oz0.ai/node/node/config"
)

// These tests drive kardianos/service for real: its systemd backend writes the
// node's unit at the real paths and runs the real systemctl. PID 1 here is not
// systemd, so systemctl runs offline (SYSTEMD_OFFLINE=1, as in a chroot or an image
// build): enable and disable make and remove their symlinks, daemon-reload, start
// and stop are acknowledged and ignored. What a running systemd does with the unit
// is TestSystemdLive's, which runs only where PID 1 is systemd.

// nsEnv names the test a re-executed test binary runs inside its mount namespace.
const nsEnv = "OZ0_SERVICE_TEST_MOUNTNS"

// inSystemdLayout runs the calling test again in a private mount namespace of its
// own (unshare --mount; nothing is mounted on the real machine) with a systemd-like
// layout: a tmpfs on /run holding /run/systemd/system, made before the binary
// starts so the library's detection at package initialisation sees it, and a tmpfs
// on /etc/systemd/system. It returns true in the re-executed test, false (the
// child's verdict reported) in the caller.
func inSystemdLayout(t *testing.T) bool {
	t.Helper()
	if os.Getenv(nsEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the library's install at /etc/systemd/system in a mount namespace was NOT tested")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is not installed (util-linux): the library's install at /etc/systemd/system was NOT tested")
	}
	if _, err := os.Stat("/etc/systemd/system"); err != nil {
		t.Skipf("no /etc/systemd/system to mount over (%v): the library's system-scope install was NOT tested", err)
	}
	const setup = `mount -t tmpfs -o mode=0755 oz0test /run && mkdir -p /run/systemd/system && mount -t tmpfs -o mode=0755 oz0test /etc/systemd/system && exec "$0" "$@"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", setup,
		os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), nsEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a mount namespace of its own:\n%s", out)
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test in its mount namespace did not pass: %v", err)
	}
	return false
}

// offline makes systemctl act on files only, as in a chroot.
func offline(t *testing.T) {
	t.Setenv("SYSTEMD_OFFLINE", "1")
}

// forcedSystemd is the systemd manager through the library's systemd backend, as
// NewSystemd returns it where systemd runs (here the library detects none).
func forcedSystemd(s Spec) *Systemd {
	return &Systemd{Systemctl: Systemctl{User: s.User}, spec: s, sys: systemdSystem()}
}

func notes(r Result) string { return strings.Join(r.Notes, "\n") }

// On a systemd layout the library detects systemd, and service install writes the
// golden units at their real paths through it, for system and user scope alike:
// enabled, owner-only umask or not 0644, root-owned; again with the same flags is a
// no-op; other flags replace the unit (the node's atomic write); uninstall through
// the library disables and removes it.
func TestLibraryInstallsTheGolden(t *testing.T) {
	if !inSystemdLayout(t) {
		return
	}
	if p := ks.Platform(); p != systemdPlatform {
		t.Fatalf("with /run/systemd/system present the library detects %q, want %s", p, systemdPlatform)
	}
	offline(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	// The library creates the file under the umask; the node's mode is 0644 anyway.
	defer syscall.Umask(syscall.Umask(0o077))
	ctx := context.Background()
	for _, set := range flagSets {
		t.Run(set.name, func(t *testing.T) {
			s := specFor(t, Linux, set.user, set.f)
			s.Home = home
			m := Native(s, os.Getuid())
			if err := m.Available(); err != nil {
				t.Fatalf("systemd manager on a systemd layout: %v", err)
			}
			in := &Installer{Manager: m, Chown: !set.user}
			path, wants := "/etc/systemd/system/oz0-node.service", "/etc/systemd/system/multi-user.target.wants/oz0-node.service"
			if set.user {
				path = filepath.Join(home, ".config/systemd/user/oz0-node.service")
				wants = filepath.Join(home, ".config/systemd/user/default.target.wants/oz0-node.service")
			}
			res, err := in.Install(ctx, s)
			if err != nil || !res.Changed || !strings.Contains(notes(res), "through kardianos/service") {
				t.Fatalf("install: %v %+v", err, res)
			}
			golden, err := os.ReadFile(filepath.Join("testdata", set.name+".service"))
			if err != nil {
				t.Fatal(err)
			}
			checkFile(t, path, golden, 0o644)
			checkOwner(t, path, 0, 0)
			if dst, err := os.Readlink(wants); err != nil || dst != path {
				t.Errorf("not enabled: %s -> %q (%v)", wants, dst, err)
			}

			before, _ := os.Stat(path)
			res, err = in.Install(ctx, s)
			if err != nil || res.Changed || !strings.Contains(notes(res), "nothing to do") {
				t.Errorf("second install: %v %+v", err, res)
			}
			if after, _ := os.Stat(path); !os.SameFile(before, after) {
				t.Error("second install rewrote the unit")
			}

			s2 := specFor(t, Linux, set.user, set.f)
			s2.Home = home
			s2.Run.Labels = map[string]string{"team": "ops"}
			want2, _ := Render(s2)
			res, err = in.Install(ctx, s2)
			if err != nil || !res.Changed || !strings.Contains(notes(res), "replaced") {
				t.Errorf("install with other flags: %v %+v", err, res)
			}
			checkFile(t, path, want2.Data, 0o644)

			res, err = in.Uninstall(ctx, s2)
			if err != nil || !res.Changed || !strings.Contains(notes(res), "through kardianos/service") {
				t.Errorf("uninstall: %v %+v", err, res)
			}
			for _, p := range []string{path, wants} {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s left after uninstall (%v)", p, err)
				}
			}
		})
	}
}

// The unit reaches the file as the node rendered it whatever a path in it holds
// (the binary's, --data-dir, --plugin-ro-path take any text): the library's engine
// reads "{{" as an action, so the node escapes it. A folder named {{Path}} would
// otherwise be the binary's path in the unit, {{Nope}} an error.
func TestLibraryEscapesItsEngine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: systemctl --user enable under another HOME was NOT tested")
	}
	offline(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		bin string
		f   config.Flags
	}{
		"known keys":      {"/opt/{{Name}}/oz0-node", config.Flags{"data-dir": {"/srv/{{Path}}"}, "plugin-ro-path": {"demo=/opt/{{Name | cmdEscape}}", "lint=/opt/{{if Name}}x{{end}}"}}},
		"an unknown key":  {testBinary, config.Flags{"data-dir": {"/srv/oz0"}, "plugin-ro-path": {"audit=/opt/{{Nope}}"}}},
		"braces in a row": {"/opt/{{{{oz0/oz0-node", config.Flags{"data-dir": {"/srv/{{{oz0}}}"}, "plugin-ro-path": {"demo=/opt/{ {{- x -}} }", "lint=/opt/}}{{"}}},
		"trim markers":    {"/opt/{{-/oz0-node", config.Flags{"data-dir": {"/srv/{{- Name -}}"}, "plugin-ro-path": {"demo=/opt/  {{-", "lint=/opt/{{", "audit=/opt/{"}}},
		"golden's flags":  {testBinary, flagSets[len(flagSets)-1].f},
	} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			s := specFor(t, Linux, true, c.f)
			s.Binary = c.bin
			s.Home = home
			want, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			res, err := (&Installer{Manager: forcedSystemd(s)}).Install(ctx, s)
			if err != nil || !strings.Contains(notes(res), "kardianos") {
				t.Fatalf("install: %v %+v", err, res)
			}
			checkFile(t, want.Path, want.Data, 0o644)
		})
	}
	// The plist goes through the same engine (template.go serves every backend);
	// here the systemd backend, the one that runs on Linux, writes it.
	for _, set := range flagSets {
		home := t.TempDir()
		t.Setenv("HOME", home)
		plist, err := os.ReadFile(filepath.Join("testdata", set.name+".plist"))
		if err != nil {
			t.Fatal(err)
		}
		s := specFor(t, Linux, true, set.f)
		if err := forcedSystemd(s).installNew(ctx, plist); err != nil {
			t.Fatalf("%s.plist through the engine: %v", set.name, err)
		}
		got, _ := os.ReadFile(filepath.Join(home, ".config/systemd/user/oz0-node.service"))
		if !bytes.Equal(got, plist) {
			t.Errorf("%s.plist through the library's engine comes out as\n%s", set.name, got)
		}
	}
}

// The library writes only a first file at its own path. A dangling symlink where
// the unit goes is replaced, not written through (the library would create its
// target); a user service whose home is not $HOME (where the library writes) is
// the node's to write; the library refuses a file that exists, which is why a
// replacement is the node's.
func TestLibraryOnlyWritesAFirstFileAtItsPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: systemctl --user enable under another HOME was NOT tested")
	}
	offline(t)
	ctx := context.Background()
	home := t.TempDir()
	t.Setenv("HOME", home)
	s := specFor(t, Linux, true, config.Flags{"data-dir": {"/srv/oz0"}})
	s.Home = home
	f, _ := Render(s)

	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, f.Path); err != nil {
		t.Fatal(err)
	}
	res, err := (&Installer{Manager: forcedSystemd(s)}).Install(ctx, s)
	if err != nil || strings.Contains(notes(res), "kardianos") {
		t.Errorf("install over a dangling symlink: %v %+v", err, res)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the symlink's target was written (%v)", err)
	}
	checkFile(t, f.Path, f.Data, 0o644)
	if fi, _ := os.Lstat(f.Path); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("the unit is still a symlink")
	}

	if err := forcedSystemd(s).installNew(ctx, f.Data); err == nil {
		t.Error("the library wrote over an existing unit")
	}

	other := specFor(t, Linux, true, config.Flags{"data-dir": {"/srv/oz0"}})
	other.Home = t.TempDir()
	res, err = (&Installer{Manager: forcedSystemd(other)}).Install(ctx, other)
	if err != nil || strings.Contains(notes(res), "kardianos") {
		t.Errorf("install for a home that is not $HOME: %v %+v", err, res)
	}
	want, _ := Render(other)
	checkFile(t, want.Path, want.Data, 0o644)
}

// TestMain lets the test binary stand in for the node in TestSystemdLive: started
// as "<binary> run …" by systemd, it says READY=1, pings the watchdog and stops on
// SIGTERM, as the node does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		daemon.SdNotify(false, daemon.SdNotifyReady)
		tick := time.NewTicker(10 * time.Second)
		for {
			select {
			case <-stop:
				daemon.SdNotify(false, daemon.SdNotifyStopping)
				os.Exit(0)
			case <-tick.C:
				daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			}
		}
	}
	os.Exit(m.Run())
}

// Install, start, restart, stop and uninstall against a running systemd, through
// the library: only where PID 1 is systemd.
func TestSystemdLive(t *testing.T) {
	if p := pid1(); p != "systemd" {
		t.Skipf("PID 1 is %s, not systemd: start, stop, restart and the state of an installed unit against a running systemd were NOT tested (here: the unit by systemd-analyze verify and golden files, the library's install and uninstall with systemctl offline, its start/stop/restart command lines with a recording systemctl)", p)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: a system unit against the running systemd was NOT tested")
	}
	if _, err := os.Lstat("/etc/systemd/system/" + Name + ".service"); err == nil {
		t.Skip("an oz0-node unit is installed on this machine and is left alone: the live cycle was NOT tested")
	}
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := specFor(t, Linux, false, config.Flags{"data-dir": {t.TempDir()}})
	s.Binary = bin
	m := NewSystemd(s)
	if err := m.Available(); err != nil {
		t.Fatal(err)
	}
	in := &Installer{Manager: m}
	t.Cleanup(func() { in.Uninstall(ctx, s) })
	if res, err := in.Install(ctx, s); err != nil || !strings.Contains(notes(res), "kardianos") {
		t.Fatalf("install: %v %+v", err, res)
	}
	for _, step := range []struct {
		action string
		want   State
	}{{"start", StateRunning}, {"restart", StateRunning}, {"stop", StateStopped}} {
		if err := in.Control(ctx, s, step.action); err != nil {
			t.Fatalf("%s: %v", step.action, err)
		}
		if st, err := m.State(ctx); st != step.want || err != nil {
			t.Errorf("after %s: %s %v, want %s", step.action, st, err, step.want)
		}
	}
	if res, err := in.Uninstall(ctx, s); err != nil || !res.Changed {
		t.Errorf("uninstall: %v %+v", err, res)
	}
}
