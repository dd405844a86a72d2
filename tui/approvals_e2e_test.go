package tui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fixtureplugins "oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// TestTerminalApprovals runs the real node with --approval-wait and answers its
// approvals in the TUI, in tmux, one key each: a tool call the tenant's rules do
// not allow, let through once; an egress connection to a host the manifest names
// and the tenant's list does not, allowed always (written to the list with who
// and when); another call denied. The audit view shows the answers.
// OZ0_TUI_SCREEN, if set, names a file the approval screen is written to.
func TestTerminalApprovals(t *testing.T) {
	needTmux(t)
	bin := nodeBinary(t)
	top := shortTempDir(t)
	data := filepath.Join(top, "data")
	oz := func(args ...string) *exec.Cmd {
		return exec.Command(bin, append([]string{"--data-dir", data}, args...)...)
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=oz0-e2e", "-c", "user.email=e2e@oz0.invalid"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, name := range []string{"demo", "egress-demo"} {
		repo := filepath.Join(top, "repos", name)
		os.MkdirAll(filepath.Dir(repo), 0o755)
		if _, err := fixtureplugins.Extract(name, repo); err != nil {
			t.Fatal(err)
		}
		git(repo, "init", "-q", "-b", "main")
		git(repo, "add", "-A")
		git(repo, "commit", "-qm", name+" fixture")
		if out, err := oz("plugin", "install", repo, "--by", "e2e").CombinedOutput(); err != nil {
			t.Fatalf("install %s: %v\n%s", name, err, out)
		}
	}
	os.MkdirAll(filepath.Join(data, "tenant"), 0o700)
	tenant := filepath.Join(data, "tenant", "egress")
	os.WriteFile(tenant, []byte("api.example.com\n"), 0o644)
	os.WriteFile(filepath.Join(data, "tenant", "tools"), []byte("allow demo__echo\nallow egress-demo__*\n"), 0o600)

	logf, _ := os.Create(filepath.Join(top, "node.log"))
	node := oz("run", "--approval-wait", "60s")
	node.Stdout, node.Stderr = logf, logf
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	t.Cleanup(func() {
		node.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			node.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("node log:\n%s", b)
		}
	})
	d, _ := datadir.New(data)
	c := api.NewClient(d.Control())
	waitFor(t, 30*time.Second, "both servers running", func() bool {
		st, err := c.Status(context.Background())
		if err != nil {
			return false
		}
		up := 0
		for _, p := range st.Plugins {
			for _, s := range p.Servers {
				if s.State == api.StateRunning || s.State == api.StateUnsandboxed {
					up++
				}
			}
		}
		return up == 2
	})
	// call runs `oz0-node call` in the background; its output comes on the channel.
	call := func(tool string, args ...string) <-chan string {
		out := make(chan string, 1)
		cmd := oz(append([]string{"call", tool, "--timeout", "90s"}, args...)...)
		go func() {
			b, err := cmd.CombinedOutput()
			out <- fmt.Sprintf("%s (exit: %v)", b, err)
		}()
		return out
	}

	tp := openPane(t, 120, 40, nil, fmt.Sprintf("%s tui --data-dir %s", bin, data))
	tp.waitFor(10*time.Second, "● live")

	// A tool the rules do not allow: the call waits; the banner says so.
	added := call("demo__add", "--arg", "a=2", "--arg", "b=3")
	tp.waitFor(20*time.Second, "1 REQUEST(S) WAIT FOR YOUR ANSWER")
	tp.keys("7")
	tp.waitRow(navWait, "tool", "demo/main", "demo__add")
	screen := tp.waitFor(navWait, "Approval 1: plugin demo, server main asks for demo__add", "no allow line", "o allow once")
	if f := os.Getenv("OZ0_TUI_SCREEN"); f != "" {
		os.WriteFile(f, []byte(screen), 0o644)
	}
	tp.keys("o")
	select {
	case out := <-added:
		if !strings.Contains(out, "5") || strings.Contains(out, "refused") {
			t.Fatalf("the call allowed once: %s", out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call allowed once did not return")
	}

	// A host only the manifest names: its connection waits, with the manifest's
	// reason; always writes it to the tenant's list.
	fetched := call("egress-demo__fetch", "--arg", "url=http://static.cdn.example.net/")
	tp.waitRow(20*time.Second, "egress", "egress-demo/fetcher", "static.cdn.example.net:80")
	tp.waitFor(navWait, "manifest's reason: static files for the API", "a allow always")
	tp.keys("a")
	waitFor(t, 20*time.Second, "the host in the tenant's list", func() bool {
		b, _ := os.ReadFile(tenant)
		return strings.Contains(string(b), "\nstatic.cdn.example.net:80\n") && strings.Contains(string(b), "via tui")
	})
	b, _ := os.ReadFile(tenant)
	if !strings.Contains(string(b), "# allowed always by ") || !strings.Contains(string(b), "plugin egress-demo server fetcher asked for static.cdn.example.net:80") {
		t.Fatalf("the tenant's list after always:\n%s", b)
	}
	select {
	case out := <-fetched:
		// Allowed: the proxy dialled (the name resolves nowhere here), never refused it.
		if strings.Contains(out, "may not reach") {
			t.Fatalf("the connection allowed always was refused: %s", out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fetch allowed always did not return")
	}

	// Deny.
	denied := call("demo__add", "--arg", "a=1", "--arg", "b=1")
	tp.waitRow(20*time.Second, "tool", "demo/main", "demo__add")
	tp.keys("d")
	select {
	case out := <-denied:
		if !strings.Contains(out, "denied by") {
			t.Fatalf("the denied call: %s", out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the denied call did not return")
	}

	// The audit view has each answer.
	tp.keys("6")
	tp.waitRow(navWait, "approval", "#1 demo__add", "once")
	tp.waitRow(navWait, "approval", "static.cdn.example.net:80", "always")
	tp.waitRow(navWait, "approval", "demo__add", "deny")
	tp.keys("q")
}
