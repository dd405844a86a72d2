package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"oz0.ai/node/node/datadir"
)

// unavailable is a Manager that cannot be asked anything.
type unavailable struct{ name, why string }

func (u unavailable) Name() string                         { return u.name }
func (u unavailable) Available() error                     { return fmt.Errorf("%w: %s", ErrNoManager, u.why) }
func (u unavailable) Reload(context.Context) error         { return u.Available() }
func (u unavailable) Enable(context.Context) error         { return u.Available() }
func (u unavailable) Disable(context.Context) error        { return u.Available() }
func (u unavailable) Start(context.Context) error          { return u.Available() }
func (u unavailable) Stop(context.Context) error           { return u.Available() }
func (u unavailable) Restart(context.Context) error        { return u.Available() }
func (u unavailable) State(context.Context) (State, error) { return StateUnknown, u.Available() }

// Installer writes the service's files under Root and asks Manager to act.
type Installer struct {
	// Root is prepended to every path written ("" is the real "/"); tests point it
	// at a temporary folder.
	Root    string
	Manager Manager
	// Chown makes written files root:wheel (uid 0, gid 0), as launchd requires of a
	// LaunchDaemon; set when installing a system service as root.
	Chown bool
	Log   *slog.Logger
}

// Result says what an install or uninstall did, in the operator's words.
type Result struct {
	Path    string   // the file on the target machine
	Changed bool     // whether a file was written or removed
	Notes   []string // what was done or skipped, and why
}

func (in *Installer) log() *slog.Logger {
	if in.Log != nil {
		return in.Log
	}
	return slog.Default()
}

func (in *Installer) real(p string) string {
	if in.Root == "" {
		return p
	}
	return filepath.Join(in.Root, p)
}

// Install writes the unit or plist for s. The same content already installed is a
// no-op; different content replaces the file, and a running service is restarted
// so it runs with the new flags. When no service manager runs here, the file is
// written and the Result says what was not done.
func (in *Installer) Install(ctx context.Context, s Spec) (Result, error) {
	f, err := Render(s)
	if err != nil {
		return Result{}, err
	}
	res := Result{Path: f.Path}
	dst := in.real(f.Path)
	old, err := os.ReadFile(dst)
	switch {
	case err == nil && bytes.Equal(old, f.Data):
		if fi, err := os.Stat(dst); err == nil && fi.Mode().Perm() == f.Mode {
			res.Notes = append(res.Notes, "already installed with the same flags: nothing to do")
			return res, nil
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return res, fmt.Errorf("read installed %s: %w", dst, err)
	}
	replacing := err == nil
	mgrErr := in.Manager.Available()
	// Only a first install goes through the library: nothing may be at the path,
	// not even a dangling symlink (which reads as absent), since the library
	// would write through it where the node's atomic write replaces it.
	if _, lerr := os.Lstat(dst); errors.Is(lerr, fs.ErrNotExist) && mgrErr == nil {
		if lib, ok := in.library(f.Path); ok {
			return in.installNew(ctx, s, f, lib, res)
		}
	}

	wasRunning := false
	if replacing && mgrErr == nil {
		st, err := in.Manager.State(ctx)
		wasRunning = err == nil && st == StateRunning
	}

	for _, d := range f.Dirs {
		if err := in.mkdir(in.real(d), 0o700); err != nil {
			return res, err
		}
	}
	if err := in.mkdir(filepath.Dir(dst), 0o755); err != nil {
		return res, err
	}
	if err := datadir.WriteFileAtomic(dst, f.Data, f.Mode); err != nil {
		return res, fmt.Errorf("install %s: %w", f.Path, err)
	}
	if in.Chown {
		if err := os.Chown(dst, 0, 0); err != nil {
			return res, fmt.Errorf("install %s: chown root:wheel: %w", f.Path, err)
		}
	}
	res.Changed = true
	if replacing {
		res.Notes = append(res.Notes, "replaced "+f.Path+" (the flags differ)")
	} else {
		res.Notes = append(res.Notes, "wrote "+f.Path)
	}
	in.log().Info("service file written", "path", f.Path, "replaced", replacing)

	if mgrErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s was not asked to load it: %v", in.Manager.Name(), mgrErr))
		return res, nil
	}
	if err := in.Manager.Reload(ctx); err != nil {
		return res, fmt.Errorf("install: %w", err)
	}
	if err := in.Manager.Enable(ctx); err != nil {
		return res, fmt.Errorf("install: enable: %w", err)
	}
	res.Notes = append(res.Notes, "enabled at "+bootOrLogin(s))
	if s.User && s.OS == Linux {
		res.Notes = append(res.Notes, "a user service runs only while you are logged in unless lingering is on: loginctl enable-linger $USER")
	}
	if wasRunning {
		if err := in.Manager.Restart(ctx); err != nil {
			return res, fmt.Errorf("install: restart with the new flags: %w", err)
		}
		res.Notes = append(res.Notes, "restarted the running service with the new flags")
	} else {
		res.Notes = append(res.Notes, "not started: run oz0-node service start")
	}
	return res, nil
}

// library is a Manager whose service library (kardianos/service, library.go)
// writes a first service file and registers it, and (on Linux) removes it again.
type library interface {
	// libraryPath is where the library writes the file.
	libraryPath() (string, error)
	// installNew writes data at libraryPath, which must not exist, and enables
	// it (systemd: enable and daemon-reload; launchd: enable).
	installNew(ctx context.Context, data []byte) error
	// uninstall stops, disables and removes the file, and reloads; false when
	// the library cannot (launchd's would unload with the legacy command).
	uninstall(ctx context.Context) (bool, error)
}

// library returns the Manager's service library when it may write path: only into
// the real root ("" Root) and only where the library's own path is the spec's (a
// user service under a HOME that is not the account's home goes the node's way).
func (in *Installer) library(path string) (library, bool) {
	lib, ok := in.Manager.(library)
	if !ok || in.Root != "" {
		return nil, false
	}
	p, err := lib.libraryPath()
	if err != nil || p != path {
		in.log().Info("the service library's path is not the service's: the node handles the file", "path", path, "library_path", p, "err", err)
		return nil, false
	}
	return lib, true
}

// installNew is a first install through the service library. The file it writes
// must be the node's rendering byte for byte; its mode and owner are the node's
// (the library creates the file under the umask, as whoever runs it).
func (in *Installer) installNew(ctx context.Context, s Spec, f File, lib library, res Result) (Result, error) {
	for _, d := range f.Dirs {
		if err := in.mkdir(d, 0o700); err != nil {
			return res, err
		}
	}
	if err := in.mkdir(filepath.Dir(f.Path), 0o755); err != nil {
		return res, err
	}
	if err := lib.installNew(ctx, f.Data); err != nil {
		return res, fmt.Errorf("install %s: %w", f.Path, err)
	}
	if err := os.Chmod(f.Path, f.Mode); err != nil {
		return res, fmt.Errorf("install %s: %w", f.Path, err)
	}
	if in.Chown {
		if err := os.Chown(f.Path, 0, 0); err != nil {
			return res, fmt.Errorf("install %s: chown root:wheel: %w", f.Path, err)
		}
	}
	got, err := os.ReadFile(f.Path)
	if err != nil {
		return res, fmt.Errorf("install %s: read back what the service library wrote: %w", f.Path, err)
	}
	if !bytes.Equal(got, f.Data) {
		return res, fmt.Errorf("install %s: the service library wrote other content than the node rendered (oz0-node service unit prints the node's; installing again replaces the file with it)", f.Path)
	}
	res.Changed = true
	res.Notes = append(res.Notes, "wrote "+f.Path+" (through kardianos/service)", "enabled at "+bootOrLogin(s))
	in.log().Info("service file written", "path", f.Path, "replaced", false, "by", "kardianos/service")
	if s.User && s.OS == Linux {
		res.Notes = append(res.Notes, "a user service runs only while you are logged in unless lingering is on: loginctl enable-linger $USER")
	}
	res.Notes = append(res.Notes, "not started: run oz0-node service start")
	return res, nil
}

func bootOrLogin(s Spec) string {
	if s.User {
		return "login"
	}
	return "boot"
}

// mkdir creates a folder and the missing ones above it with mode, changing
// nothing that already exists.
func (in *Installer) mkdir(p string, mode os.FileMode) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(p, mode); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	// MkdirAll is subject to the umask; the mode is meant.
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// Uninstall stops and disables the service and removes its file. A service never
// installed is reported as such, not as an error.
func (in *Installer) Uninstall(ctx context.Context, s Spec) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Path: s.Path()}
	dst := in.real(s.Path())
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		res.Notes = append(res.Notes, "not installed: nothing to remove")
		return res, nil
	}
	mgrErr := in.Manager.Available()
	if mgrErr == nil {
		if lib, ok := in.library(s.Path()); ok {
			did, err := lib.uninstall(ctx)
			if err != nil {
				return res, fmt.Errorf("uninstall: %w", err)
			}
			if did {
				res.Changed = true
				res.Notes = append(res.Notes, "removed "+s.Path()+" (through kardianos/service)", "stopped and disabled")
				in.log().Info("service file removed", "path", s.Path(), "by", "kardianos/service")
				return res, nil
			}
		}
	}
	if mgrErr == nil {
		if err := in.Manager.Stop(ctx); err != nil {
			return res, fmt.Errorf("uninstall: stop: %w", err)
		}
		if err := in.Manager.Disable(ctx); err != nil {
			return res, fmt.Errorf("uninstall: disable: %w", err)
		}
	}
	if err := os.Remove(dst); err != nil {
		return res, fmt.Errorf("uninstall: remove %s: %w", s.Path(), err)
	}
	res.Changed = true
	res.Notes = append(res.Notes, "removed "+s.Path())
	in.log().Info("service file removed", "path", s.Path())
	if mgrErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s was not asked to stop it: %v", in.Manager.Name(), mgrErr))
		return res, nil
	}
	if err := in.Manager.Reload(ctx); err != nil {
		return res, fmt.Errorf("uninstall: %w", err)
	}
	res.Notes = append(res.Notes, "stopped and disabled")
	return res, nil
}

// Installed reports whether the service's file exists.
func (in *Installer) Installed(s Spec) bool {
	_, err := os.Lstat(in.real(s.Path()))
	return err == nil
}

// Control runs start, stop or restart, refusing when nothing is installed.
func (in *Installer) Control(ctx context.Context, s Spec, action string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if !in.Installed(s) {
		return fmt.Errorf("service %s: %w (%s does not exist; run oz0-node service install)", action, ErrNotInstalled, s.Path())
	}
	var err error
	switch action {
	case "start":
		err = in.Manager.Start(ctx)
	case "stop":
		err = in.Manager.Stop(ctx)
	case "restart":
		err = in.Manager.Restart(ctx)
	default:
		return fmt.Errorf("service: unknown action %q", action)
	}
	if err != nil {
		return fmt.Errorf("service %s: %w", action, err)
	}
	return nil
}

// ErrNotInstalled is returned by Control for a service that was never installed.
var ErrNotInstalled = errors.New("not installed")

// Status is what `service status` reports: the service manager's word, the
// control socket's, and which of them the verdict trusts.
type Status struct {
	Path         string
	Installed    bool
	Manager      string
	ManagerState State
	ManagerErr   error
	Control      string
	Answers      bool
	ControlErr   error
	Verdict      string
	Trusts       string
	Running      bool
}

// Status asks the manager and pings the node's control socket (GET /v1/status).
func (in *Installer) Status(ctx context.Context, s Spec, control string) Status {
	st := Status{Path: s.Path(), Manager: in.Manager.Name(), Control: control}
	if err := s.Validate(); err != nil {
		st.ManagerErr = err
	}
	st.Installed = in.Installed(s)
	if st.Installed {
		if err := in.Manager.Available(); err != nil {
			st.ManagerState, st.ManagerErr = StateUnknown, err
		} else {
			st.ManagerState, st.ManagerErr = in.Manager.State(ctx)
		}
	}
	st.ControlErr = Ping(ctx, control)
	st.Answers = st.ControlErr == nil
	st.Verdict, st.Trusts, st.Running = Judge(st.Installed, st.Manager, st.ManagerState, st.ManagerErr, st.Answers)
	return st
}

// Judge combines the two sources. A node that answers on its control socket is
// running, whatever the manager says, so the socket is trusted when it answers;
// otherwise the manager is, when it could be asked. A service never installed is
// "not installed", never "stopped".
func Judge(installed bool, manager string, state State, mgrErr error, answers bool) (verdict, trusts string, running bool) {
	const sock = "the control socket"
	switch {
	case !installed && answers:
		return "not installed; a node started outside the service manager answers on the control socket", sock, true
	case !installed:
		return "not installed", "the service file's absence", false
	case answers && mgrErr == nil && state == StateRunning:
		return "running", sock + " (" + manager + " agrees)", true
	case answers && mgrErr == nil:
		return fmt.Sprintf("a node answers on the control socket but %s says %s: it was started by hand, not by the service", manager, state), sock, true
	case answers:
		return "running", sock + " (" + manager + " could not be asked)", true
	case mgrErr != nil:
		return "not answering; " + manager + " could not be asked", sock, false
	case state == StateRunning:
		return "running per " + manager + ", but the node does not answer on its control socket (starting, hung, or a build without the control API)", manager, true
	}
	return string(state), manager + " (the control socket does not answer)", false
}

func (st Status) String() string {
	var b bytes.Buffer
	if st.Installed {
		fmt.Fprintf(&b, "service:  installed (%s)\n", st.Path)
		switch {
		case st.ManagerErr != nil:
			fmt.Fprintf(&b, "%-9s %s (%v)\n", st.Manager+":", st.ManagerState, st.ManagerErr)
		default:
			fmt.Fprintf(&b, "%-9s %s\n", st.Manager+":", st.ManagerState)
		}
	} else {
		fmt.Fprintf(&b, "service:  not installed (no %s)\n", st.Path)
	}
	if st.Answers {
		fmt.Fprintf(&b, "control:  %s answers (GET /v1/status: 200)\n", st.Control)
	} else {
		fmt.Fprintf(&b, "control:  %s does not answer (%v)\n", st.Control, st.ControlErr)
	}
	fmt.Fprintf(&b, "verdict:  %s — trusting %s\n", st.Verdict, st.Trusts)
	return b.String()
}

// Ping connects to the node's control socket and asks GET /v1/status; only an
// HTTP 200 counts as an answer.
func Ping(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://oz0-node/v1/status", nil)
	if err != nil {
		return fmt.Errorf("ping %s: %w", socket, err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("ping %s: %w", socket, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping %s: GET /v1/status: %s", socket, resp.Status)
	}
	return nil
}
