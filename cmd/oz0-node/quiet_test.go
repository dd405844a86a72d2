package main

import (
	"debug/buildinfo"
	"fmt"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// ptyProbe runs a command on a pseudo-terminal that never answers, for at most
// argv[1] seconds (then kills it), and prints what the command wrote to the
// terminal and how long it took.
const ptyProbe = `
import os, pty, select, signal, sys, time
limit = float(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
out, start = b"", time.time()
while True:
    if time.time() - start > limit:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        break
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d:
            break
        out += d
    elif os.waitpid(pid, os.WNOHANG)[0] != 0:
        break
print(repr(out))
print("%.2f" % (time.time() - start))
`

// onSilentTerminal runs bin with args on a terminal that never answers and returns
// what it wrote there and how long it ran.
func onSilentTerminal(t *testing.T, limit time.Duration, bin string, args ...string) (string, time.Duration) {
	t.Helper()
	argv := append([]string{"-c", ptyProbe, fmt.Sprintf("%.3f", limit.Seconds()), bin}, args...)
	out, err := exec.Command("python3", argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("pty probe: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	took, _ := time.ParseDuration(lines[len(lines)-1] + "s")
	return lines[0], took
}

// TestCommandsDoNotQueryTheTerminal: the binary links the terminal UI library
// (bubbletea v2, `oz0-node tui`), and still every other command on a terminal
// writes its output and nothing else — no colour or cursor query that would stall
// on a terminal that never answers, no mode switch. The UI itself, run the same
// way, does write escape sequences: the probe sees them when they are there.
func TestCommandsDoNotQueryTheTerminal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("not tested: python3 (used to open a pseudo-terminal) is not installed")
	}
	bin := buildBinary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(info.Deps, func(m *debug.Module) bool { return m.Path == "charm.land/bubbletea/v2" }) {
		t.Fatal("oz0-node does not link charm.land/bubbletea/v2: this test would prove nothing about it")
	}
	data := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"version"}, "oz0-node"},
		{[]string{"--help"}, "Available Commands"},
		{[]string{"tui", "--help"}, "live terminal UI"},
		{[]string{"--data-dir", data, "status"}, "not running"},
		{[]string{"findings", "--reference"}, "tier-0"},
		{[]string{"--data-dir", data, "doctor"}, "tier"},
	} {
		name := strings.Join(c.args, " ")
		written, took := onSilentTerminal(t, 8*time.Second, bin, c.args...)
		if strings.Contains(written, `\x1b`) || strings.Contains(written, `\x9b`) {
			t.Errorf("oz0-node %s wrote escape sequences to the terminal: %s", name, written)
		}
		if !strings.Contains(written, c.says) {
			t.Errorf("oz0-node %s wrote %s, want it to say %q", name, written, c.says)
		}
		if took > 3*time.Second {
			t.Errorf("oz0-node %s took %s on a silent terminal", name, took)
		}
	}
	// The probe catches a command that does write to the terminal: the UI.
	written, _ := onSilentTerminal(t, 2*time.Second, bin, "--data-dir", data, "tui")
	if !strings.Contains(written, `\x1b`) || !strings.Contains(written, "NODE NOT RUNNING") {
		t.Errorf("oz0-node tui on a terminal wrote %s, want its screen drawn with escape sequences", written)
	}
}

// TestNoTerminalQueryAtInit: no package linked into oz0-node queries the terminal
// from an init function. Lip Gloss's compat package does (its adaptive colours ask
// the terminal for its background at start-up), and bubbletea v1 did.
func TestNoTerminalQueryAtInit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, bad := range []string{"charm.land/lipgloss/v2/compat", "github.com/charmbracelet/bubbletea", "github.com/charmbracelet/lipgloss", "github.com/muesli/termenv"} {
		if slices.Contains(deps, bad) {
			t.Errorf("oz0-node links %s, whose init queries the terminal", bad)
		}
	}
	if !slices.Contains(deps, "charm.land/bubbletea/v2") {
		t.Error("oz0-node does not link charm.land/bubbletea/v2: `oz0-node tui` is not in this binary")
	}
}
