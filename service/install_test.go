package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"oz0.ai/node/node/config"
)

// fakeManager records what it was asked and holds a state.
type fakeManager struct {
	calls []string
	state State
	down  error // Available's answer
}

func (f *fakeManager) Name() string     { return "systemd" }
func (f *fakeManager) Available() error { return f.down }
func (f *fakeManager) do(c string) error {
	f.calls = append(f.calls, c)
	return nil
}
func (f *fakeManager) Reload(context.Context) error  { return f.do("reload") }
func (f *fakeManager) Enable(context.Context) error  { return f.do("enable") }
func (f *fakeManager) Disable(context.Context) error { return f.do("disable") }
func (f *fakeManager) Start(context.Context) error   { f.state = StateRunning; return f.do("start") }
func (f *fakeManager) Stop(context.Context) error    { f.state = StateStopped; return f.do("stop") }
func (f *fakeManager) Restart(context.Context) error { f.state = StateRunning; return f.do("restart") }
func (f *fakeManager) State(context.Context) (State, error) {
	f.calls = append(f.calls, "state")
	return f.state, nil
}

func (f *fakeManager) take() []string { c := f.calls; f.calls = nil; return c }

func TestInstallRoundTrip(t *testing.T) {
	for _, c := range []struct {
		goos string
		user bool
	}{{Linux, false}, {Linux, true}, {Darwin, false}, {Darwin, true}} {
		t.Run(fmt.Sprintf("%s-user=%v", c.goos, c.user), func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			m := &fakeManager{state: StateStopped}
			in := &Installer{Root: root, Manager: m, Chown: os.Geteuid() == 0 && !c.user}
			dataDir := SystemDataDir
			if c.goos == Darwin {
				dataDir = "/Library/Application Support/oz0-node"
			}
			s := specFor(t, c.goos, c.user, config.Flags{"data-dir": {dataDir}, "plugin-sandbox-exempt": {"host-health@0123456789abcdef"}})
			want, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(root, want.Path)

			// First install: written with its mode, reloaded and enabled, not started.
			res, err := in.Install(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Changed || !reflect.DeepEqual(m.take(), []string{"reload", "enable"}) {
				t.Errorf("first install: changed=%v calls=%v notes=%v", res.Changed, m.calls, res.Notes)
			}
			checkFile(t, file, want.Data, 0o644)
			if in.Chown {
				checkOwner(t, file, 0, 0)
			} else if !c.user {
				t.Log("not root: root:wheel ownership of the system file was NOT checked")
			}
			for _, d := range want.Dirs {
				fi, err := os.Stat(filepath.Join(root, d))
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("log folder %s: %v %v, want a 0700 folder", d, fi, err)
				}
			}

			// Same flags again: nothing written, nothing asked.
			before, _ := os.Stat(file)
			res, err = in.Install(ctx, s)
			if err != nil || res.Changed || len(m.take()) != 0 {
				t.Errorf("second install: changed=%v err=%v calls=%v", res.Changed, err, m.calls)
			}
			after, _ := os.Stat(file)
			if !os.SameFile(before, after) {
				t.Error("second install rewrote the file")
			}

			// Different flags while running: replaced and restarted.
			m.state = StateRunning
			s2 := specFor(t, c.goos, c.user, config.Flags{"data-dir": {dataDir}, "label": {"team=infra"}})
			want2, _ := Render(s2)
			res, err = in.Install(ctx, s2)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Changed || !reflect.DeepEqual(m.take(), []string{"state", "reload", "enable", "restart"}) {
				t.Errorf("re-install: changed=%v calls=%v", res.Changed, m.calls)
			}
			checkFile(t, file, want2.Data, 0o644)
			leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*tmp*"))
			if len(leftovers) > 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}

			// Different flags while stopped: replaced, not started.
			m.state = StateStopped
			if _, err := in.Install(ctx, s); err != nil {
				t.Fatal(err)
			}
			if got := m.take(); !reflect.DeepEqual(got, []string{"state", "reload", "enable"}) {
				t.Errorf("re-install while stopped: calls=%v", got)
			}

			// Uninstall: stopped, disabled, removed, reloaded; then "not installed".
			res, err = in.Uninstall(ctx, s)
			if err != nil || !res.Changed {
				t.Fatalf("uninstall: %v %v", res, err)
			}
			if got := m.take(); !reflect.DeepEqual(got, []string{"stop", "disable", "reload"}) {
				t.Errorf("uninstall calls=%v", got)
			}
			if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("file still there after uninstall: %v", err)
			}
			res, err = in.Uninstall(ctx, s)
			if err != nil || res.Changed || !strings.Contains(strings.Join(res.Notes, " "), "not installed") || len(m.take()) != 0 {
				t.Errorf("second uninstall: %v %v", res, err)
			}
			if err := in.Control(ctx, s, "start"); !errors.Is(err, ErrNotInstalled) {
				t.Errorf("start after uninstall: %v, want ErrNotInstalled", err)
			}
		})
	}
}

func checkFile(t *testing.T, path string, want []byte, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s holds\n%s\nwant\n%s", path, got, want)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != mode {
		t.Errorf("%s mode %o, want %o", path, fi.Mode().Perm(), mode)
	}
}

// Without a service manager the file is written and the result says what was not
// done; nothing is asked.
func TestInstallWithoutManager(t *testing.T) {
	root := t.TempDir()
	m := &fakeManager{down: fmt.Errorf("%w: systemd is not running", ErrNoManager)}
	in := &Installer{Root: root, Manager: m}
	s := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	res, err := in.Install(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.calls) != 0 || !strings.Contains(strings.Join(res.Notes, "\n"), "systemd is not running") {
		t.Errorf("calls=%v notes=%v", m.calls, res.Notes)
	}
	if _, err := os.Stat(filepath.Join(root, s.Path())); err != nil {
		t.Error(err)
	}
}

// Invalid input writes nothing: the root folder stays empty.
func TestInstallRefusesBeforeWriting(t *testing.T) {
	root := t.TempDir()
	m := &fakeManager{}
	in := &Installer{Root: root, Manager: m}
	s := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	s.Run.DataDir = "relative/data"
	if _, err := in.Install(context.Background(), s); err == nil {
		t.Fatal("installed a unit with a relative data folder")
	}
	s = specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	s.Run.Labels = map[string]string{"k": "v\n[Service]\nExecStartPre=/bin/sh -c evil"}
	if _, err := in.Install(context.Background(), s); err == nil {
		t.Fatal("installed a unit with a newline in a flag")
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 0 || len(m.calls) != 0 {
		t.Errorf("refused installs left %v and asked %v", ents, m.calls)
	}
}

func TestJudge(t *testing.T) {
	down := errors.New("systemd is not running")
	for _, c := range []struct {
		name      string
		installed bool
		state     State
		err       error
		answers   bool
		verdict   string
		trusts    string
		running   bool
	}{
		{"never installed", false, StateUnknown, nil, false, "not installed", "absence", false},
		{"never installed, node by hand", false, StateUnknown, nil, true, "not installed; a node started outside", "control socket", true},
		{"running and answering", true, StateRunning, nil, true, "running", "systemd agrees", true},
		{"running, not answering", true, StateRunning, nil, false, "running per systemd, but the node does not answer", "systemd", true},
		{"stopped", true, StateStopped, nil, false, "stopped", "systemd", false},
		{"failed", true, StateFailed, nil, false, "failed", "systemd", false},
		{"stopped but answering", true, StateStopped, nil, true, "started by hand", "control socket", true},
		{"manager down, answering", true, StateUnknown, down, true, "running", "could not be asked", true},
		{"manager down, silent", true, StateUnknown, down, false, "not answering", "control socket", false},
	} {
		v, tr, r := Judge(c.installed, "systemd", c.state, c.err, c.answers)
		if !strings.HasPrefix(v, c.verdict) && !strings.Contains(v, c.verdict) || !strings.Contains(tr, c.trusts) || r != c.running {
			t.Errorf("%s: got (%q, %q, %v), want verdict ~%q trusting ~%q running %v", c.name, v, tr, r, c.verdict, c.trusts, c.running)
		}
		if !c.installed && strings.Contains(v, "stopped") {
			t.Errorf("%s: a never-installed service is reported as stopped: %q", c.name, v)
		}
	}
}

// serveControl serves GET /v1/status with code on a unix socket.
func serveControl(t *testing.T, code int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "oz0svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestStatus(t *testing.T) {
	ctx := context.Background()
	s := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	ok, bad := serveControl(t, http.StatusOK), serveControl(t, http.StatusInternalServerError)
	missing := filepath.Join(t.TempDir(), "none.sock")

	root := t.TempDir()
	m := &fakeManager{state: StateStopped}
	in := &Installer{Root: root, Manager: m}

	st := in.Status(ctx, s, missing)
	if st.Installed || st.Running || st.Verdict != "not installed" || strings.Contains(st.String(), "stopped") {
		t.Errorf("never installed: %+v\n%s", st, st)
	}
	if _, err := in.Install(ctx, s); err != nil {
		t.Fatal(err)
	}
	st = in.Status(ctx, s, bad)
	if !st.Installed || st.Answers || st.Running || st.Verdict != "stopped" {
		t.Errorf("installed, stopped, socket answering 500: %+v", st)
	}
	m.state = StateRunning
	st = in.Status(ctx, s, ok)
	if !st.Answers || !st.Running || st.Verdict != "running" || !strings.Contains(st.String(), "trusting the control socket") {
		t.Errorf("running and answering: %+v\n%s", st, st)
	}
}

func TestPing(t *testing.T) {
	ctx := context.Background()
	if err := Ping(ctx, serveControl(t, http.StatusOK)); err != nil {
		t.Errorf("200: %v", err)
	}
	if err := Ping(ctx, serveControl(t, http.StatusServiceUnavailable)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v", err)
	}
	if err := Ping(ctx, filepath.Join(t.TempDir(), "x.sock")); err == nil {
		t.Error("no socket: nil error")
	}
}

// launchd is driven with bootstrap/bootout/kickstart in the right domain, never
// the legacy load/unload.
func TestLaunchdCommands(t *testing.T) {
	for _, c := range []struct {
		user         bool
		domain, path string
	}{
		{false, "system", "/Library/LaunchDaemons/ai.oz0.node.plist"},
		{true, "gui/501", "/Users/dev/Library/LaunchAgents/ai.oz0.node.plist"},
	} {
		s := specFor(t, Darwin, c.user, config.Flags{"data-dir": {"/x"}})
		l := NewLaunchd(s, 501)
		var got []string
		loaded, state := false, "running"
		l.run = func(_ context.Context, name string, args ...string) (string, error) {
			got = append(got, name+" "+strings.Join(args, " "))
			if args[0] == "print" {
				if !loaded {
					return "", errors.New("Could not find service")
				}
				return "ai.oz0.node = {\n\tactive count = 1\n\tstate = " + state + "\n}\n", nil
			}
			switch args[0] {
			case "bootstrap":
				loaded = true
			case "bootout":
				loaded = false
			}
			return "", nil
		}
		ctx := context.Background()
		target := c.domain + "/ai.oz0.node"
		if st, _ := l.State(ctx); st != StateStopped {
			t.Errorf("not loaded: state %s, want stopped", st)
		}
		got = nil
		_ = l.Start(ctx)
		_ = l.Start(ctx)
		_ = l.Restart(ctx)
		_ = l.Stop(ctx)
		_ = l.Stop(ctx)
		want := []string{
			"launchctl print " + target, "launchctl bootstrap " + c.domain + " " + c.path,
			"launchctl print " + target, "launchctl kickstart " + target,
			"launchctl print " + target, "launchctl bootout " + target, "launchctl bootstrap " + c.domain + " " + c.path,
			"launchctl print " + target, "launchctl bootout " + target,
			"launchctl print " + target,
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("launchctl calls:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		loaded = true
		for out, want := range map[string]State{"running": StateRunning, "not running": StateStopped} {
			state = out
			if st, err := l.State(ctx); st != want || err != nil {
				t.Errorf("state = %s: got %s %v, want %s", out, st, err, want)
			}
		}
	}
}

// Status finds the installed node's data folder from the installed file, whatever
// flags it was installed with.
func TestInstalledArgv(t *testing.T) {
	for _, goos := range []string{Linux, Darwin} {
		for _, fs := range flagSets {
			root := t.TempDir()
			in := &Installer{Root: root, Manager: &fakeManager{}}
			s := specFor(t, goos, fs.user, fs.f)
			if _, err := in.Install(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			got, err := in.InstalledArgv(s)
			if err != nil || !reflect.DeepEqual(got, s.Argv()) {
				t.Errorf("%s %s: %q %v, want %q", goos, fs.name, got, err, s.Argv())
			}
			if d := FlagValue(got, "--data-dir"); d != s.Run.DataDir {
				t.Errorf("%s %s: data folder %q, want %q", goos, fs.name, d, s.Run.DataDir)
			}
		}
	}
	for _, bad := range []string{`/bin/x "open`, `/bin/x 50%`, `/bin/x "a\`} {
		if _, err := SplitExecStart(bad); err == nil {
			t.Errorf("SplitExecStart(%q): no error", bad)
		}
	}
}
