package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ptyProbe runs a command on a pseudo-terminal that never answers and prints
// what the command wrote to it and how long it took.
const ptyProbe = `
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out, start = b"", time.time()
while time.time() - start < 8:
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

// TestCommandsDoNotQueryTheTerminal: a command on a terminal writes its output and
// nothing else — no colour or cursor queries that would stall on a terminal that
// never answers (the terminal UI, which asks, is a binary of its own).
func TestCommandsDoNotQueryTheTerminal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("not tested: python3 (used to open a pseudo-terminal) is not installed")
	}
	bin := buildBinary(t)
	out, err := exec.Command("python3", "-c", ptyProbe, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("pty probe: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	written, took := lines[0], lines[len(lines)-1]
	if strings.Contains(written, `\x1b`) {
		t.Errorf("oz0-node version wrote escape sequences to the terminal: %s", written)
	}
	if !strings.Contains(written, "oz0-node") {
		t.Errorf("oz0-node version wrote %s", written)
	}
	if d, _ := time.ParseDuration(took + "s"); d > 3*time.Second {
		t.Errorf("oz0-node version took %s on a silent terminal", d)
	}
}
