package service

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"howett.net/plist"

	"oz0.ai/node/internal/golden"
	"oz0.ai/node/node/config"
)

const testBinary = "/usr/local/bin/oz0-node"

// flagSets are the run flags the golden files pin, as an operator would type them.
var flagSets = []struct {
	name string
	user bool
	f    config.Flags
}{
	{name: "root-default", f: config.Flags{"data-dir": {SystemDataDir}}},
	{name: "root-exempt-commit-label", f: config.Flags{"data-dir": {SystemDataDir}, "plugin-sandbox-exempt": {"host-health@0123456789abcdef0123456789abcdef01234567", "own-sandbox"}, "label": {"team=infra", "oz0.example/zone=eu-1"}, "backend": {"bwrap"}, "plugin-backend": {"egress-demo=gvisor"}}},
	{name: "root-egress-cidr-custom-data", f: config.Flags{"data-dir": {"/srv/oz0 node/data%1$x"}, "plugin-sandbox": {"auto"}, "egress-allow-cidr": {"10.20.0.0/16", "fd00::/8"}, "mcp-listen": {"127.0.0.1:7777"}}},
	{name: "user-off", user: true, f: config.Flags{"data-dir": {"/home/dev/.local/share/oz0-node"}, "plugin-sandbox": {"off"}, "label": {"laptop=yes"}}},
}

func specFor(t *testing.T, goos string, user bool, f config.Flags) Spec {
	t.Helper()
	run, err := config.Parse(f)
	if err != nil {
		t.Fatalf("flags %+v: %v", f, err)
	}
	home := "/home/dev"
	if goos == Darwin {
		home = "/Users/dev"
	}
	return Spec{OS: goos, User: user, Home: home, Binary: testBinary, Run: run}
}

func TestUnitGolden(t *testing.T) {
	for _, fs := range flagSets {
		t.Run(fs.name, func(t *testing.T) {
			s := specFor(t, Linux, fs.user, fs.f)
			f, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, fs.name+".service", f.Data)
			unit := string(f.Data)
			for _, want := range []string{"\nUMask=0077\n", "\nRestart=on-failure\n", "\nRestartSec=5s\n", "\nKillMode=mixed\n"} {
				if !strings.Contains(unit, want) {
					t.Errorf("unit lacks %q", strings.TrimSpace(want))
				}
			}
			if sys := !fs.user; sys != strings.Contains(unit, "\nAfter=network-online.target\n") {
				t.Errorf("After=network-online.target present=%v, want %v", !sys, sys)
			}
			state := !fs.user && s.Run.DataDir == SystemDataDir
			if state != strings.Contains(unit, "\nStateDirectory=oz0-node\n") {
				t.Errorf("StateDirectory present=%v, want %v (data folder %s)", !state, state, s.Run.DataDir)
			}
			wantPath := "/etc/systemd/system/oz0-node.service"
			if fs.user {
				wantPath = "/home/dev/.config/systemd/user/oz0-node.service"
			}
			if f.Path != wantPath || f.Mode != 0o644 {
				t.Errorf("file %s %o, want %s 0644", f.Path, f.Mode, wantPath)
			}
		})
	}
}

// execStart reads the unit's ExecStart back with SplitExecStart, which splits it as
// systemd would (quotes, backslash escapes, %% and $$), so the flags survive the trip.
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	var line string
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			line = v
		}
	}
	args, err := SplitExecStart(line)
	if err != nil {
		t.Fatalf("ExecStart %q: %v", line, err)
	}
	return args
}

func TestUnitExecStartRoundTrip(t *testing.T) {
	for _, fs := range flagSets {
		s := specFor(t, Linux, fs.user, fs.f)
		b, err := RenderSystemd(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := execStart(t, string(b)), s.Argv(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: ExecStart reads back as %q, want %q", fs.name, got, want)
		}
	}
}

func TestPlistGolden(t *testing.T) {
	for _, fs := range flagSets {
		t.Run(fs.name, func(t *testing.T) {
			f := maps.Clone(fs.f)
			if slices.Equal(f["data-dir"], []string{SystemDataDir}) {
				f["data-dir"] = []string{"/Library/Application Support/oz0-node"}
			}
			s := specFor(t, Darwin, fs.user, f)
			out, err := Render(s)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, fs.name+".plist", out.Data)
			wantPath, logs := "/Library/LaunchDaemons/ai.oz0.node.plist", "/Library/Logs/oz0-node"
			if fs.user {
				wantPath, logs = "/Users/dev/Library/LaunchAgents/ai.oz0.node.plist", "/Users/dev/Library/Logs/oz0-node"
			}
			if out.Path != wantPath || out.Mode != 0o644 || !reflect.DeepEqual(out.Dirs, []string{logs}) {
				t.Errorf("file %s %o dirs %v, want %s 0644 [%s]", out.Path, out.Mode, out.Dirs, wantPath, logs)
			}
			// The plist decodes back to the same keys and values.
			var got map[string]any
			if _, err := plist.Unmarshal(out.Data, &got); err != nil {
				t.Fatalf("decode plist: %v", err)
			}
			args := make([]any, 0)
			for _, a := range s.Argv() {
				args = append(args, a)
			}
			want := map[string]any{
				"Label":             "ai.oz0.node",
				"ProgramArguments":  args,
				"RunAtLoad":         true,
				"KeepAlive":         map[string]any{"SuccessfulExit": false, "Crashed": true},
				"ThrottleInterval":  uint64(5),
				"ExitTimeOut":       uint64(30),
				"Umask":             uint64(63),
				"ProcessType":       "Standard",
				"StandardOutPath":   logs + "/oz0-node.out.log",
				"StandardErrorPath": logs + "/oz0-node.err.log",
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("plist decodes to\n%#v\nwant\n%#v", got, want)
			}
		})
	}
}

// TestUnitVerify runs systemd-analyze verify on every rendered unit. ExecStart
// must name a real executable for verify to pass, so the units point at this test
// binary; everything else is as install writes it.
func TestUnitVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the units were NOT verified by systemd")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, fs := range flagSets {
		t.Run(fs.name, func(t *testing.T) {
			s := specFor(t, Linux, fs.user, fs.f)
			s.Binary = bin
			b, err := RenderSystemd(s)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			unit := filepath.Join(dir, Name+".service")
			if err := os.WriteFile(unit, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"verify", unit}
			cmd := exec.Command(analyze, args...)
			if fs.user {
				// A user manager needs a runtime folder even to verify.
				rt := filepath.Join(dir, "runtime")
				if err := os.Mkdir(rt, 0o700); err != nil {
					t.Fatal(err)
				}
				cmd = exec.Command(analyze, append([]string{"--user"}, args...)...)
				cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt)
			}
			out, err := cmd.CombinedOutput()
			// verify exits 0 on unknown keys but says so: any output is a finding.
			if err != nil || len(bytes.TrimSpace(out)) > 0 {
				t.Errorf("systemd-analyze %s: %v\n%s\n%s", strings.Join(cmd.Args[1:], " "), err, out, b)
			}
		})
	}
}

// The verify test must be able to fail: a unit with a typo is reported.
func TestUnitVerifyCatchesTypo(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the verify check itself was NOT tested")
	}
	bin, _ := os.Executable()
	s := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	s.Binary = bin
	b, _ := RenderSystemd(s)
	b = bytes.Replace(b, []byte("KillMode=mixed"), []byte("KilMode=mixed"), 1)
	unit := filepath.Join(t.TempDir(), Name+".service")
	if err := os.WriteFile(unit, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(analyze, "verify", unit).CombinedOutput()
	if !bytes.Contains(out, []byte("KilMode")) {
		t.Errorf("systemd-analyze verify did not report the typo: %s", out)
	}
}

func TestSpecRefused(t *testing.T) {
	good := specFor(t, Linux, false, config.Flags{"data-dir": {SystemDataDir}})
	for name, edit := range map[string]func(*Spec){
		"windows":           func(s *Spec) { s.OS = "windows" },
		"relative binary":   func(s *Spec) { s.Binary = "oz0-node" },
		"unclean binary":    func(s *Spec) { s.Binary = "/usr/local/bin/../bin/oz0-node" },
		"relative data":     func(s *Spec) { s.Run.DataDir = "data" },
		"user without home": func(s *Spec) { s.User, s.Home = true, "" },
		"newline in label":  func(s *Spec) { s.Run.Labels = map[string]string{"a": "b\nExecStartPre=/bin/sh"} },
	} {
		s := good
		s.Run.Labels = map[string]string{}
		edit(&s)
		if _, err := Render(s); err == nil {
			t.Errorf("%s: rendered, want an error", name)
		}
	}
}

// TestSplitExecStartLiteral pins the splitter on written-out lines, so the round
// trip above cannot pass with renderer and splitter wrong the same way.
func TestSplitExecStartLiteral(t *testing.T) {
	for line, want := range map[string][]string{
		`/usr/bin/oz0-node run --label a=b`:                           {"/usr/bin/oz0-node", "run", "--label", "a=b"},
		`/usr/bin/oz0-node run --data-dir "/srv/oz0 node/data%%1$$x"`: {"/usr/bin/oz0-node", "run", "--data-dir", "/srv/oz0 node/data%1$x"},
		`"/opt/my oz0/oz0-node" run --label "q=\"x\""`:                {"/opt/my oz0/oz0-node", "run", "--label", `q="x"`},
	} {
		got, err := SplitExecStart(line)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SplitExecStart(%q) = %q, %v; want %q", line, got, err, want)
		}
	}
}
