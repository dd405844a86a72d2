package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oz0.ai/node/node/config"
	"oz0.ai/node/service"
)

// runServiceCLI runs the command tree with args and returns stdout, stderr and the
// error.
func runServiceCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errb.String(), err
}

func TestServiceInstallCLI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the system-service install through the CLI was NOT tested (the service package tests it)")
	}
	dir := t.TempDir()
	flags := []string{"--data-dir", "/var/lib/oz0-node", "--plugin-sandbox-exempt", "host-health@0123456789abcdef", "--label", "team=infra", "--egress-allow-cidr", "10.0.0.0/8", "--plugin-hooks-see", "audit=demo", "--server-notify-rate", "50"}
	args := append([]string{"service", "install", "--root", dir, "--binary", "/usr/local/bin/oz0-node"}, flags...)
	out, _, err := runServiceCLI(t, args...)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	run, err := config.Parse(config.Flags{"data-dir": {"/var/lib/oz0-node"}, "plugin-sandbox-exempt": {"host-health@0123456789abcdef"}, "label": {"team=infra"}, "egress-allow-cidr": {"10.0.0.0/8"}, "plugin-hooks-see": {"audit=demo"}, "server-notify-rate": {"50"}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := service.Render(service.Spec{OS: "linux", Binary: "/usr/local/bin/oz0-node", Run: run})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "etc/systemd/system/oz0-node.service"))
	if err != nil || string(got) != string(want.Data) {
		t.Fatalf("installed unit (%v):\n%s\nwant\n%s", err, got, want.Data)
	}
	if !strings.Contains(string(got), "--plugin-hooks-see audit=demo") {
		t.Errorf("the unit does not carry the hook grant:\n%s", got)
	}
	if !strings.Contains(string(got), "--server-notify-rate 50") {
		t.Errorf("the unit does not carry the notification rate:\n%s", got)
	}
	if !strings.Contains(out, "was not asked") {
		t.Errorf("install with --root should say the manager was not asked: %s", out)
	}
	// `service unit` prints exactly what install wrote.
	uargs := append([]string{"service", "unit", "--os", "linux", "--binary", "/usr/local/bin/oz0-node"}, flags...)
	unit, _, err := runServiceCLI(t, uargs...)
	if err != nil || unit != string(want.Data) {
		t.Errorf("service unit (%v):\n%s", err, unit)
	}
	out, _, err = runServiceCLI(t, append(args[:0:0], args...)...)
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second install: %v %s", err, out)
	}
	out, _, err = runServiceCLI(t, "service", "uninstall", "--root", dir, "--binary", "/usr/local/bin/oz0-node")
	if err != nil || !strings.Contains(out, "removed") {
		t.Errorf("uninstall: %v %s", err, out)
	}
}

func TestServiceInstallRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range [][]string{
		{"--label", "no-equals"},
		{"--plugin-sandbox", "sometimes"},
		{"--plugin-sandbox-exempt", "Bad_Name"},
		{"--egress-allow-cidr", "10.0.0.1/8"},
		{"--backend", "docker"},
		{"--plugin-hooks-see", "audit=*"},
	} {
		args := append([]string{"service", "install", "--root", dir, "--binary", "/usr/local/bin/oz0-node"}, bad...)
		_, _, err := runServiceCLI(t, args...)
		if _, ok := err.(*usageError); !ok {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused installs wrote %v", ents)
	}
}

func TestServiceUnitDarwin(t *testing.T) {
	out, _, err := runServiceCLI(t, "service", "unit", "--os", "darwin", "--binary", "/usr/local/bin/oz0-node", "--user", "--label", "laptop=yes")
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	for _, want := range []string{"<key>Umask</key>", "<integer>63</integer>", "<string>ai.oz0.node</string>", "<string>laptop=yes</string>",
		"<string>" + filepath.Join(home, "Library", "Application Support", "oz0-node") + "</string>"} {
		if !strings.Contains(out, want) {
			t.Errorf("plist lacks %s:\n%s", want, out)
		}
	}
	if _, _, err := runServiceCLI(t, "service", "unit", "--os", "windows"); err == nil {
		t.Error("--os windows accepted")
	}
}

func TestServiceStatusNotInstalled(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runServiceCLI(t, "service", "status", "--root", dir, "--binary", "/usr/local/bin/oz0-node", "--data-dir", filepath.Join(dir, "data"))
	if ee, ok := err.(*exitError); !ok || ee.code != exitFailure {
		t.Errorf("status of a never-installed service: %v, want exit 1", err)
	}
	if !strings.Contains(out, "not installed") || strings.Contains(out, "stopped") {
		t.Errorf("status says:\n%s", out)
	}
}

// status pings the control socket of the data folder the service was installed
// with, not the default one.
func TestServiceStatusUsesInstalledDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: status of a system service through the CLI was NOT tested")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "srv data")
	if _, _, err := runServiceCLI(t, "service", "install", "--root", dir, "--binary", "/usr/local/bin/oz0-node", "--data-dir", data); err != nil {
		t.Fatal(err)
	}
	out, _, _ := runServiceCLI(t, "service", "status", "--root", dir, "--binary", "/usr/local/bin/oz0-node")
	if !strings.Contains(out, filepath.Join(data, "run", "control.sock")) || !strings.Contains(out, "installed") {
		t.Errorf("status did not look under the installed data folder %s:\n%s", data, out)
	}
}

func TestServiceInstallRefusesTemporaryBinary(t *testing.T) {
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	if !strings.HasPrefix(exe, tmp+"/") {
		t.Skipf("the test binary %s is not under %s: the temporary-binary refusal was NOT tested", exe, tmp)
	}
	dir := t.TempDir()
	_, _, err := runServiceCLI(t, "service", "install", "--root", dir)
	if _, ok := err.(*usageError); !ok || !strings.Contains(err.Error(), "temporary folder") {
		t.Errorf("install from a temporary binary: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused install wrote %v", ents)
	}
}
