package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// fill writes a file until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

func healthPID(t *testing.T, d datadir.Dir) int {
	t.Helper()
	h, _, err := api.ReadHealth(d.Health(), func(int) bool { return true })
	if err != nil {
		return 0
	}
	return h.PID
}

// A full data folder (a small tmpfs) raises the disk finding, served by the
// control API, naming the file and the error, while calls go on; when space
// returns the finding clears and health.json names the live node. A node started
// while the disk is full does the same: health.json stops naming the dead node
// it replaced as soon as writing works.
func TestE2EFullDiskIsReportedAndHealthFollowsTheLiveNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: mounting a small tmpfs for the data folder needs root")
	}
	bin := buildBinary(t)
	parent, err := os.MkdirTemp("", "oz0-e2e-disk-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o711)
	t.Cleanup(func() { os.RemoveAll(parent) })
	data := filepath.Join(parent, "data")
	os.Mkdir(data, 0o711)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m,mode=0711", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("not tested: mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", data).Run() })
	n := &e2eNode{t: t, bin: bin, data: data, log: &bytes.Buffer{}}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("node log:\n%s", n.log.String())
		}
	})
	repo, _ := gitRepo(t, parent, "demo")
	if out, err := n.oz("plugin", "install", repo, "--by", "e2e"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	d, _ := datadir.New(data)
	filler := filepath.Join(data, "filler")
	findingFor := func(path string) (api.Finding, bool) { return findingOf(n.status(), api.CodeDisk, path) }

	// Running, then the disk fills.
	n.start("--backend", "bwrap")
	n.waitState("demo", "main", api.StateRunning)
	fill(t, filler)
	if out, err := n.oz("restart", "demo/main"); err != nil { // a change status must record
		t.Fatalf("restart: %v %s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	var f api.Finding
	for ok := false; !ok; f, ok = findingFor(d.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("no disk finding for %s; findings %+v", d.Status(), n.status().Findings)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(f.Message, "no space left on device") || f.Severity != api.SevError {
		t.Errorf("disk finding %+v", f)
	}
	if st := n.status(); st.Node.Health == "ok" {
		t.Errorf("health says ok while its files cannot be written")
	}
	n.waitState("demo", "main", api.StateRunning)
	if out, err := n.oz("call", "demo__echo", "--arg", "text=still"); err != nil || strings.TrimSpace(out) != "still" {
		t.Errorf("calls stopped with the disk full: %v %q", err, out)
	}
	os.Remove(filler)
	deadline = time.Now().Add(10 * time.Second)
	for _, ok := findingFor(d.Status()); ok; _, ok = findingFor(d.Status()) {
		if time.Now().After(deadline) {
			t.Fatal("the disk finding stays after space returned")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok := findingFor(d.Health()); ok {
		t.Error("the disk finding for health.json stays after space returned")
	}

	// Killed; the disk fills; a new node starts on it.
	n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
	dead := healthPID(t, d)
	if dead == 0 {
		t.Fatal("no health.json of the first node")
	}
	fill(t, filler)
	n.start("--backend", "bwrap")
	live := n.status().Node.PID
	if _, ok := findingFor(d.Health()); !ok {
		deadline = time.Now().Add(10 * time.Second)
		for _, ok := findingFor(d.Health()); !ok; _, ok = findingFor(d.Health()) {
			if time.Now().After(deadline) {
				t.Fatalf("no disk finding for health.json from a node started on a full disk; findings %+v", n.status().Findings)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := healthPID(t, d); got != dead {
		t.Logf("health.json names pid %d (the dead node was %d)", got, dead)
	}
	os.Remove(filler)
	began := time.Now()
	for healthPID(t, d) != live {
		if time.Since(began) > 10*time.Second {
			t.Fatalf("health.json names pid %d, not the live node %d, 10s after space returned", healthPID(t, d), live)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("health.json named the live node %.1fs after space returned", time.Since(began).Seconds())
	if h, stale, err := api.ReadHealth(d.Health(), func(pid int) bool { return syscall.Kill(pid, 0) == nil }); err != nil || stale || h.Status == api.HealthStopped {
		t.Errorf("health.json read as %+v stale %v %v; the node runs", h, stale, err)
	}
}
