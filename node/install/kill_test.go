package install

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// startPaused starts an install child that stops at step and returns once it has
// said so.
func startPaused(t *testing.T, d datadir.Dir, spec childSpec, step string) *exec.Cmd {
	t.Helper()
	c := child(t, d, spec, step)
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	paused := make(chan string, 1)
	go func() {
		var seen strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "paused at install step "+step) {
				paused <- ""
				io.Copy(io.Discard, stderr)
				return
			}
		}
		paused <- seen.String()
	}()
	select {
	case out := <-paused:
		if out != "" {
			c.Wait()
			t.Fatalf("child ended before step %s:\n%s", step, out)
		}
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		t.Fatalf("child did not reach step %s", step)
	}
	return c
}

func kill(t *testing.T, c *exec.Cmd) {
	t.Helper()
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
}

// An install killed with SIGKILL at any step leaves the previous installation
// active and complete, nothing half-written in the plugin's folder, and only
// staging to clean; the next install then works.
func TestKillMidInstallLosesNothing(t *testing.T) {
	d := newData(t)
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"NEW": "second\n"})
	mustInstall(t, d, Options{Source: repo, Commit: c1})

	for _, step := range []string{stepFetched, stepStaged, stepBuilt, stepPlaced, stepActivated} {
		t.Run(step, func(t *testing.T) {
			c := startPaused(t, d, childSpec{Install: &Options{Source: repo, Commit: c2, By: "killed"}}, step)
			kill(t, c)

			want := c1
			if step == stepActivated {
				want = c2 // the switch happened: the new commit is complete and active
			}
			in, err := installed.Lookup(d, "demo")
			if err != nil || in.Commit != want {
				t.Fatalf("after kill at %s: %v, active %+v, want %s", step, err, in, want)
			}
			if readFile(t, filepath.Join(in.Dir, "plugin.json")) != readFile(t, filepath.Join(repo, "plugin.json")) {
				t.Fatal("active files incomplete")
			}
			_, errNew := os.Stat(filepath.Join(in.Dir, "NEW"))
			if (want == c2) != (errNew == nil) {
				t.Fatalf("active commit %s has the wrong files (NEW: %v)", want, errNew)
			}
			if _, err := os.Lstat(d.Current("demo") + ".tmp"); err == nil {
				t.Fatal("a half-made current link is left")
			}
			for _, e := range ledger(t, d, "") {
				if e.Who == "killed" {
					t.Fatalf("the killed install reached the ledger: %+v", e)
				}
			}
			if err := CleanStaging(d); err != nil {
				t.Fatal(err)
			}
			stagingEmpty(t, d)

			next := mustInstall(t, d, Options{Source: repo, Commit: c2})
			if next.Commit != c2 {
				t.Fatal(next)
			}
			if got := readFile(t, filepath.Join(next.Dir, "NEW")); got != "second\n" {
				t.Fatalf("NEW = %q", got)
			}
			mustInstall(t, d, Options{Source: repo, Commit: c1}) // back to c1 for the next step
		})
	}

	t.Run("placed-never-activated", func(t *testing.T) {
		d := newData(t)
		mustInstall(t, d, Options{Source: repo, Commit: c1})
		kill(t, startPaused(t, d, childSpec{Install: &Options{Source: repo, Commit: c2}}, stepPlaced))
		if _, err := os.Stat(d.PluginCommit("demo", c2)); err != nil {
			t.Fatalf("the killed install did not get to place its folder: %v", err)
		}
		if err := CleanStaging(d); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(d.PluginCommit("demo", c2)); err == nil {
			t.Fatal("CleanStaging left the commit folder a killed install placed but never activated")
		}
		if in, err := installed.Lookup(d, "demo"); err != nil || in.Commit != c1 {
			t.Fatalf("active: %+v %v", in, err)
		}
		stagingEmpty(t, d)
	})

	t.Run(stepRemoving, func(t *testing.T) {
		c := startPaused(t, d, childSpec{Remove: &RemoveOptions{Name: "demo"}}, stepRemoving)
		kill(t, c)
		if _, err := os.Lstat(d.Plugin("demo")); err == nil {
			t.Fatal("a removal killed after the move left the plugin folder in place")
		}
		if err := CleanStaging(d); err != nil {
			t.Fatal(err)
		}
		stagingEmpty(t, d)
		mustInstall(t, d, Options{Source: repo, Commit: c1})
	})
}

// The plugins lock: while one install holds it (paused), another waits; when the
// first is killed the kernel frees the lock and the second completes. Staging is
// not cleaned under a running install.
func TestConcurrentInstallsAreSerialized(t *testing.T) {
	d := newData(t)
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"NEW": "second\n"})

	a := startPaused(t, d, childSpec{Install: &Options{Source: repo, Commit: c1, By: "a"}}, stepPlaced)
	b := child(t, d, childSpec{Install: &Options{Source: repo, Commit: c2, By: "b"}}, "")
	var bout bytes.Buffer
	b.Stdout, b.Stderr = &bout, &bout
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("second install finished while the first held the lock: %v\n%s", err, bout.String())
	case <-time.After(1500 * time.Millisecond):
	}
	ents, _ := os.ReadDir(d.Staging())
	if err := CleanStaging(d); err != nil || len(ents) == 0 {
		t.Fatalf("clean staging: %v (entries %d)", err, len(ents))
	}
	if after, _ := os.ReadDir(d.Staging()); len(after) != len(ents) {
		t.Fatal("CleanStaging removed the staging of a running install")
	}
	kill(t, a)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second install: %v\n%s", err, bout.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("second install did not finish after the first was killed")
	}
	if !strings.Contains(bout.String(), "waiting for another plugin install") {
		t.Errorf("the waiting install did not say why it waits:\n%s", bout.String())
	}
	in, err := installed.Lookup(d, "demo")
	if err != nil || in.Commit != c2 {
		t.Fatalf("active %+v %v, want %s", in, err, c2)
	}

	// Two at once, no pause: both succeed, the ledger has both in some order.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([][]byte, 2)
	for i, c := range []string{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := child(t, d, childSpec{Install: &Options{Source: repo, Commit: c, By: "race"}}, "")
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("concurrent install %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	race := 0
	for _, e := range ledger(t, d, "demo") {
		if e.Who == "race" {
			race++
		}
	}
	if race < 1 || race > 2 {
		t.Fatalf("ledger has %d entries of the concurrent installs", race)
	}
	if _, err := installed.Lookup(d, "demo"); err != nil {
		t.Fatal(err)
	}
	stagingEmpty(t, d)
}
