package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An unsandboxed tool (tier 0, off, exempt) gets exactly the Spec's environment,
// never the node's, runs in the Spec's folder, and finds its program on the PATH
// of its own environment, not the node's.
func TestDirectRunsWithTheSpecsEnvironmentOnly(t *testing.T) {
	t.Setenv("OZ0_NODE_SECRET", "node-only")
	bin := t.TempDir()
	tool := filepath.Join(bin, "oz0-direct-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho \"dir=$(pwd)\"\nenv | sort\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	s := &Spec{Plugin: "demo", Argv: []string{"oz0-direct-tool"}, Dir: work, Env: []string{"PATH=" + bin + ":/usr/bin:/bin", "TOOL_ONLY=1"}}
	p, err := Direct{}.Command(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	out, err := p.Cmd.Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != "dir="+work {
		t.Errorf("ran in %q, want %q", lines[0], work)
	}
	var env []string
	for _, l := range lines[1:] {
		// The shell adds its own few variables; everything else must be the Spec's.
		if k, _, _ := strings.Cut(l, "="); k == "PWD" || k == "SHLVL" || k == "_" || k == "OLDPWD" {
			continue
		}
		env = append(env, l)
	}
	if !slices.Equal(env, s.Env) {
		t.Errorf("tool environment %q, want exactly %q", env, s.Env)
	}

	// The same program name on the node's PATH only is not found.
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	s.Env = []string{"PATH=/usr/bin:/bin"}
	if _, err := (Direct{}).Command(context.Background(), s); err == nil || !strings.Contains(err.Error(), "not found in the tool's PATH") {
		t.Errorf("a program only on the node's PATH: %v, want not found", err)
	}
	if _, err := (Direct{}).Command(context.Background(), &Spec{Plugin: "demo"}); err == nil {
		t.Error("an empty command was accepted")
	}
}

// A stop reaches the tool's children: the tool leads a process group of its own,
// and cancelling its context kills the whole group.
func TestDirectStopKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	s := &Spec{Plugin: "demo", Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"}}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Direct{}.Command(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if child == 0 {
		t.Fatal("the tool never started its child")
	}
	if pgid, err := syscall.Getpgid(p.Cmd.Process.Pid); err != nil || pgid != p.Cmd.Process.Pid {
		t.Errorf("tool's process group %d (%v), want its own %d", pgid, err, p.Cmd.Process.Pid)
	}
	cancel()
	p.Cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(child, 0); err != nil {
			break // gone
		}
		// Killed but not yet reaped by init: a zombie still answers signal 0.
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat"); err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("the tool's child %d outlived the stop", child)
		}
	}
}
