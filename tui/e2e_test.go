package tui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fixtureplugins "oz0.ai/node/fixtures"
	"oz0.ai/node/internal/testbin"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// The end-to-end tests drive the real oz0-node binary in a real terminal: tmux, with
// keys sent and the screen read back as text.

// nodeBinary is oz0-node, whose `tui` command is the UI (internal/testbin).
func nodeBinary(t *testing.T) string {
	t.Helper()
	return testbin.Node(t)
}

func needTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: the real-terminal end-to-end test did not run")
	}
}

var paneSeq atomic.Int32

// pane is one detached tmux session on a tmux server of its own, whose socket lives
// in the test's temporary folder: the test touches no one else's sessions, kills
// only its own and leaves no socket behind.
type pane struct {
	t      *testing.T
	socket string
	name   string
}

func openPane(t *testing.T, w, h int, env []string, command string) *pane {
	t.Helper()
	name := fmt.Sprintf("oz0tui-e2e-%d-%d", os.Getpid(), paneSeq.Add(1))
	p := &pane{t: t, socket: filepath.Join(shortTempDir(t), "tmux"), name: name}
	args := []string{"new-session", "-d", "-s", name, "-x", fmt.Sprint(w), "-y", fmt.Sprint(h)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	// A CI runner's CI variable makes termenv treat any output as no terminal (no
	// colour); the pane is a real terminal, so the TUI must not inherit it.
	args = append(args, "env -u CI "+command)
	if out, err := p.tmux(args...); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last screen of %s:\n%s", name, p.capture(false))
		}
		p.tmux("kill-session", "-t", name)
	})
	return p
}

func (p *pane) tmux(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-S", p.socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
	return string(out), err
}

func (p *pane) keys(keys ...string) {
	p.t.Helper()
	for _, k := range keys {
		if out, err := p.tmux("send-keys", "-t", p.name, k); err != nil {
			p.t.Fatalf("tmux send-keys %s: %v\n%s", k, err, out)
		}
	}
}

func (p *pane) capture(escapes bool) string {
	args := []string{"capture-pane", "-p", "-t", p.name}
	if escapes {
		args = append(args, "-e")
	}
	out, _ := p.tmux(args...)
	return out
}

// navWait bounds how long a key press may take to show. It is generous because
// packages test in parallel on two cores; what must show within a second (live
// updates from the node) keeps its own one-second bound.
const navWait = 8 * time.Second

// flat folds runs of white space (line wraps included) into one space, so a
// message wrapped at the terminal's width still matches.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

// waitFor polls the screen until it shows every string, and returns it.
func (p *pane) waitFor(d time.Duration, want ...string) string {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := p.capture(false)
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) && !strings.Contains(flat(s), flat(w)) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("after %s the screen does not show %q:\n%s", d, missing, s)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitRow polls until one line of the screen holds all the words.
func (p *pane) waitRow(d time.Duration, words ...string) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		s := p.capture(false)
		if hasRow(s, words...) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			p.t.Fatalf("after %s no line shows %q:\n%s", d, words, s)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitMatch polls until the screen matches re.
func (p *pane) waitMatch(d time.Duration, re *regexp.Regexp) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		s := p.capture(false)
		if re.MatchString(s) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			p.t.Fatalf("after %s the screen does not match %s:\n%s", d, re, s)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// sgrColour matches a colour-setting escape sequence.
var sgrColour = regexp.MustCompile(`\x1b\[[0-9;]*(3[0-9]|4[0-9]|9[0-7]|10[0-7])[0-9;]*m`)

// TestTerminalRecordedNode runs `oz0-node tui` in tmux against a recorded tier-1
// model served by the real control API on the data folder's control socket: it
// switches views with keys and reads the screen, restarts a server, follows a log,
// and sees changes the node pushes after the TUI opened.
func TestTerminalRecordedNode(t *testing.T) {
	needTmux(t)
	bin := nodeBinary(t)
	dir := shortTempDir(t)
	d, err := datadir.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(loadStatus(t, "tier1.json"))
	p.logs["crashy/crashy"] = []string{"crashy: starting", "SystemExit: crashy: exits at start on purpose"}
	serve(t, p, d.Control())

	exitFile := filepath.Join(dir, "tui.exit")
	tp := openPane(t, 120, 40, nil, fmt.Sprintf("env -u NO_COLOR %s tui --data-dir %s; echo $? > %s", bin, dir, exitFile))

	// Plugins: the refused tool and the crash.
	tp.waitFor(10*time.Second, "● live", "[1 Plugins(8)]")
	tp.waitRow(navWait, "health", "refused", "none")
	tp.waitRow(navWait, "crashy", "backing-off", "7")

	// The refused tool's detail: its reason and the flag that would exempt it.
	tp.keys("j", "j", "j", "Enter")
	tp.waitFor(navWait, "Server health  REFUSED", "declares sandbox: host (it must see",
		`reason: "reads the host's load, disks and services"`,
		"--plugin-sandbox-exempt host-health@9f3b2a1c0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a")
	tp.keys("Escape")

	// The crash: its last stderr lines.
	tp.keys("j", "j", "Enter")
	tp.waitFor(navWait, "Server crashy  BACKING-OFF", "7 restarts", "| SystemExit: crashy: exits at start on purpose")
	tp.keys("Escape")

	// Findings, exemptions, egress.
	tp.keys("2")
	tp.waitFor(navWait, "[2 Findings(6)]")
	tp.waitRow(navWait, "ERROR", "crash-loop", "crashy/crashy")
	tp.waitRow(navWait, "WARNING", "server-refused", "host-health/health")
	tp.keys("3")
	tp.waitFor(navWait, "[3 Exemptions(3, 2!)]", "WARNING: commit does not match")
	tp.keys("Tab")
	tp.waitFor(navWait, "[4 Egress(4 denied)]")
	tp.waitRow(navWait, "DENY", "egress-demo/fetcher", "evil.example.org:443", "manifest: no egress entry")

	// Colour in a colour terminal; never a colour without one (below).
	if s := tp.capture(true); !sgrColour.MatchString(s) {
		t.Errorf("no colour in a tmux terminal without NO_COLOR:\n%q", s)
	}

	// Live: a state change and a denial the node pushes now show within a second.
	tp.keys("1")
	tp.waitFor(navWait, "[1 Plugins(8)]")
	p.push(api.Event{Type: "server", Time: "2026-11-29T11:30:00Z", Server: &api.ServerEvent{Plugin: "egress-demo", Server: "fetcher", State: api.StateCrashed, Detail: "exit status 3"}})
	// The table row itself, not the note that reports the change.
	took := tp.waitMatch(time.Second, regexp.MustCompile(`(?m)^ +fetcher +crashed +bwrap `))
	t.Logf("the pushed server state showed after %s", took)
	p.push(api.Event{Type: "egress", Time: "2026-11-29T11:30:01Z", Egress: &api.EgressDecision{Time: "2026-11-29T11:30:01Z", Plugin: "egress-demo", Server: "fetcher", Host: "exfil.example.org", Port: 443, Decision: "deny", Rule: "manifest: no egress entry matches exfil.example.org"}})
	tp.waitMatch(time.Second, regexp.MustCompile(`(?m)^ +egress-demo +crashed .* 12/4 `))
	tp.keys("4")
	tp.waitRow(time.Second, "DENY", "exfil.example.org:443")

	// Restart with confirmation, through the control API.
	tp.keys("1", "g", "j", "j", "j", "j", "j", "r")
	tp.waitFor(navWait, "Restart crashy/crashy? y/n")
	tp.keys("y")
	tp.waitFor(navWait, "restart of crashy/crashy requested")
	if r := p.restarted(); !slices.Equal(r, []string{"crashy/crashy"}) {
		t.Errorf("restarts asked of the node: %v, want crashy/crashy", r)
	}

	// Follow its log; a line the node writes now shows.
	tp.keys("l")
	tp.waitFor(navWait, "log of crashy/crashy · following", "SystemExit: crashy: exits at start on purpose")
	waitFor(t, navWait, "the TUI to follow the log", func() bool { return p.followers("crashy/crashy") == 1 })
	p.logLine("crashy/crashy", "crashy: line written after the TUI opened")
	tp.waitFor(time.Second, "crashy: line written after the TUI opened")

	tp.keys("q")
	waitFor(t, 5*time.Second, "the TUI to exit on q", func() bool { _, err := os.Stat(exitFile); return err == nil })
	if b, _ := os.ReadFile(exitFile); strings.TrimSpace(string(b)) != "0" {
		t.Errorf("oz0-node tui exited with %q", b)
	}
}

// TestTerminalNoColorAndNotRunning: under NO_COLOR the screen is plain text; with no
// node on the socket the TUI says so and how to start it, at 80×24.
func TestTerminalNoColorAndNotRunning(t *testing.T) {
	needTmux(t)
	bin := nodeBinary(t)
	dir := shortTempDir(t)
	tp := openPane(t, 80, 24, []string{"NO_COLOR=1"}, fmt.Sprintf("%s tui --data-dir %s", bin, dir))
	tp.waitFor(5*time.Second, "NODE NOT RUNNING", "Start it with: oz0-node run --data-dir "+dir)

	d, _ := datadir.New(dir)
	serve(t, newProvider(loadStatus(t, "tier0.json")), d.Control())
	tp.waitFor(10*time.Second, "● live", "TIER 0 — NO PLUGIN SANDBOX")
	if s := tp.capture(true); sgrColour.MatchString(s) {
		t.Errorf("colour under NO_COLOR:\n%q", s)
	}
	tp.keys("q")
}

// TestTerminalRealNode runs the real node (`oz0-node run`) on the fixture plugins —
// the refused host-health, the crashing crashy, egress-demo with a denied call — and
// the TUI against it in tmux.
func TestTerminalRealNode(t *testing.T) {
	needTmux(t)
	bin := nodeBinary(t)
	top := shortTempDir(t)
	// The folder stays 0700 (as MkdirTemp makes it), so plugin users are off and
	// the node says why: the servers run as the node's user, in bwrap.
	data := filepath.Join(top, "data")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--data-dir", data}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("oz0-node %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=oz0-e2e", "-c", "user.email=e2e@oz0.invalid"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, name := range []string{"demo", "egress-demo", "host-health", "crashy"} {
		repo := filepath.Join(top, "repos", name)
		if err := os.MkdirAll(filepath.Dir(repo), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := fixtureplugins.Extract(name, repo); err != nil {
			t.Fatal(err)
		}
		git(repo, "init", "-q", "-b", "main")
		git(repo, "add", "-A")
		git(repo, "commit", "-qm", name+" fixture")
		run("plugin", "install", repo, "--by", "e2e")
	}
	if err := os.MkdirAll(filepath.Join(data, "tenant"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "tenant", "egress"), []byte("api.example.com\nallowed.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	logf, err := os.Create(filepath.Join(top, "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin, "--data-dir", data, "run")
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
	waitFor(t, 20*time.Second, "the node's control socket", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the node exited: %v", err)
		default:
		}
		_, err := c.Status(context.Background())
		return err == nil
	})
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Node.Tier == 0 {
		t.Logf("the node runs at tier 0 here: host-health runs unsandboxed, not refused")
	}

	// One egress call the tenant list denies (.cdn.example.net is only in the
	// manifest), once the server that makes it runs.
	waitFor(t, 20*time.Second, "egress-demo/fetcher to run", func() bool {
		st, err := c.Status(context.Background())
		if err != nil {
			return false
		}
		for _, p := range st.Plugins {
			for _, s := range p.Servers {
				if p.Name == "egress-demo" && s.Name == "fetcher" {
					return s.State == api.StateRunning
				}
			}
		}
		return false
	})
	out, err := exec.Command(bin, "--data-dir", data, "call", "egress-demo__fetch", "--arg", "url=http://static.cdn.example.net/", "--timeout", "20s").CombinedOutput()
	t.Logf("the denied call (an error is expected): %v\n%s", err, out)

	tp := openPane(t, 120, 40, nil, fmt.Sprintf("%s tui --data-dir %s", bin, data))
	tp.waitFor(10*time.Second, "● live", "[1 Plugins(4)]")
	if st.Node.Tier > 0 {
		tp.waitRow(2*time.Second, "health", "refused")
		tp.keys("/", "h", "e", "a", "l", "t", "h", "Enter", "j", "Enter")
		tp.waitFor(2*time.Second, "Server health  REFUSED", "declares sandbox: host", "reads the host's load, disks and services",
			"--plugin-sandbox-exempt host-health@")
		tp.keys("Escape", "Escape")
	}
	tp.waitRow(20*time.Second, "flaky", "backing-off")

	// The crash loop's finding comes once the server has crashed often enough.
	tp.keys("2")
	tp.waitRow(60*time.Second, "crash-loop", "crashy/flaky")
	if st.Node.Tier > 0 {
		tp.waitRow(time.Second, "server-refused", "host-health/health")
	}
	tp.keys("4")
	tp.waitRow(2*time.Second, "DENY", "egress-demo", "static.cdn.example.net:80")

	// A state change made from outside after the TUI opened: restart demo's server
	// through the control API, as another operator would.
	tp.keys("1")
	if err := c.Restart(context.Background(), "demo", "main"); err != nil {
		t.Fatal(err)
	}
	tp.waitFor(5*time.Second, "demo/main is now running")
	tp.keys("q")
}
