package tui

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"oz0.ai/node/node/api"
)

// liveTUI runs the TUI under teatest on a socket, with the real clock.
func liveTUI(t *testing.T, sock string, w, h int) *liveT {
	t.Helper()
	return runTUI(t, NewModel(NewSocketSource(sock), Options{NoColor: true, Socket: sock, DataDir: "/var/lib/oz0-node"}), w, h)
}

// liveT is a TUI running under teatest, with the screens it drew.
type liveT struct {
	*teatest.TestModel
	rec *recorder
}

// runTUI runs m under teatest at w×h until the test ends.
func runTUI(t *testing.T, m *Model, w, h int) *liveT {
	t.Helper()
	rec := &recorder{Model: m}
	tm := teatest.NewTestModel(t, rec, teatest.WithInitialTermSize(w, h))
	t.Cleanup(func() { tm.Quit() })
	return &liveT{TestModel: tm, rec: rec}
}

// waitOut waits until the screens the TUI drew since the last wait hold every
// string between them.
func waitOut(t *testing.T, tm *liveT, d time.Duration, want ...string) {
	t.Helper()
	tm.rec.waitFor(t, d, want...)
}

func finalView(t *testing.T, tm *liveT) string {
	t.Helper()
	tm.Quit()
	return tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*recorder).frame()
}

func startNode(t *testing.T, status string) (*provider, *server, string) {
	t.Helper()
	p := newProvider(loadStatus(t, status))
	p.logs["crashy/crashy"] = []string{"crashy: starting", "SystemExit: crashy: exits at start on purpose"}
	sock := filepath.Join(shortTempDir(t), "control.sock")
	return p, serve(t, p, sock), sock
}

// TestLiveServerChange: a state change the node pushes after the TUI opened shows
// within a second, in the table and as a note.
func TestLiveServerChange(t *testing.T) {
	p, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live", "egress-demo")

	start := time.Now()
	p.push(api.Event{Type: "server", Time: "2026-11-29T11:30:00Z", Server: &api.ServerEvent{Plugin: "egress-demo", Server: "fetcher", State: api.StateCrashed, Detail: "exit status 3"}})
	waitOut(t, tm, time.Second, "egress-demo/fetcher is now crashed: exit status 3")
	t.Logf("the change showed after %s", time.Since(start))

	p.push(api.Event{Type: "egress", Egress: &api.EgressDecision{Time: "2026-11-29T11:30:01Z", Plugin: "egress-demo", Server: "fetcher", Host: "exfil.example.org", Port: 443, Decision: "deny", Rule: "manifest: no egress entry matches exfil.example.org"}})
	tm.Send(keyMsg("4"))
	waitOut(t, tm, time.Second, "exfil.example.org:443")

	tm.Send(keyMsg("1"))
	out := finalView(t, tm)
	if !regexp.MustCompile(`(?m)^ +fetcher +crashed +bwrap `).MatchString(out) {
		t.Errorf("the fetcher row does not say crashed:\n%s", out)
	}
	if !hasRow(out, "egress-demo", "12/4") {
		t.Errorf("the denial was not counted for egress-demo:\n%s", out)
	}
}

// hasRow says whether one line of out holds all the words.
func hasRow(out string, words ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestReconnect: the node going away shows at once, the last status stays on screen,
// and the TUI comes back by itself when the node does.
func TestReconnect(t *testing.T) {
	_, srv, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live")

	srv.stop()
	waitOut(t, tm, 2*time.Second, "CONNECTION LOST", "○ disconnected", "Start the node with: oz0-node run --data-dir /var/lib/oz0-node")

	st := loadStatus(t, "tier1.json")
	st.Plugins[2].Servers[0].State = api.StateRunning // crashy came back up with the node
	p2 := newProvider(st)
	serve(t, p2, sock)
	waitOut(t, tm, 10*time.Second, "● live")
	// "live" shows as the stream opens; the new node's status is its first event,
	// drawn a moment later.
	waitFor(t, 5*time.Second, "the new node's status on screen", func() bool {
		tm.rec.mu.Lock()
		defer tm.rec.mu.Unlock()
		return hasRow(tm.rec.last, "crashy", "running")
	})
	out := finalView(t, tm)
	if strings.Contains(out, "CONNECTION LOST") {
		t.Errorf("still shows the connection as lost:\n%s", out)
	}
	if !hasRow(out, "crashy", "running") || hasRow(out, "crashy", "backing-off") {
		t.Errorf("the status after reconnecting is not the new node's:\n%s", out)
	}
}

// TestNodeNotRunning: with nothing on the socket the TUI says so, with the command
// that starts the node, and picks the node up when it starts.
func TestNodeNotRunning(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "control.sock")
	tm := liveTUI(t, sock, 80, 24)
	waitOut(t, tm, 3*time.Second, "NODE NOT RUNNING", "oz0-node run --data-dir")

	serve(t, newProvider(loadStatus(t, "tier1.json")), sock)
	waitOut(t, tm, 10*time.Second, "● live")
	if out := finalView(t, tm); strings.Contains(out, "NOT RUNNING") || !strings.Contains(out, "host-health") {
		t.Errorf("after the node started:\n%s", out)
	}
}

// TestRestartAsksFirst: r asks; n does nothing; y restarts through the control API.
func TestRestartAsksFirst(t *testing.T) {
	p, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 80, 24)
	waitOut(t, tm, 5*time.Second, "● live")
	for range 5 {
		tm.Send(keyMsg("j"))
	}
	tm.Send(keyMsg("r"))
	waitOut(t, tm, time.Second, "Restart crashy/crashy? y/n")
	tm.Send(keyMsg("n"))
	waitOut(t, tm, time.Second, "restart cancelled")
	if r := p.restarted(); len(r) != 0 {
		t.Fatalf("n restarted %v", r)
	}
	tm.Send(keyMsg("r"))
	waitOut(t, tm, time.Second, "Restart crashy/crashy? y/n")
	tm.Send(keyMsg("y"))
	waitOut(t, tm, 3*time.Second, "restart of crashy/crashy requested")
	if r := p.restarted(); !slices.Equal(r, []string{"crashy/crashy"}) {
		t.Errorf("restarted %v, want crashy/crashy", r)
	}
	// A refusal from the node shows as an error, never as success.
	p.mu.Lock()
	p.st.Plugins[2].Servers[0].Name = "renamed"
	p.mu.Unlock()
	tm.Send(keyMsg("r"))
	tm.Send(keyMsg("y"))
	waitOut(t, tm, 3*time.Second, "restart crashy/crashy failed")
}

// TestServerDetailShowsDroppedNotifications: a server whose notifications the
// node dropped says how many in its detail, as the node's status counts them.
func TestServerDetailShowsDroppedNotifications(t *testing.T) {
	p, _, sock := startNode(t, "tier1.json")
	p.mu.Lock()
	p.st.Plugins[2].Servers[0].NotesDropped = 4242
	p.mu.Unlock()
	tm := liveTUI(t, sock, 100, 40)
	waitOut(t, tm, 5*time.Second, "● live")
	for range 5 {
		tm.Send(keyMsg("j"))
	}
	tm.Send(keyMsg("enter"))
	waitOut(t, tm, 3*time.Second, "Server crashy", "notify", "dropped: 4242 notifications")
}

// TestFollowLog: l opens the server's log and new lines arrive as the node writes them.
func TestFollowLog(t *testing.T) {
	p, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 80, 24)
	waitOut(t, tm, 5*time.Second, "● live")
	for range 5 {
		tm.Send(keyMsg("j"))
	}
	tm.Send(keyMsg("l"))
	waitOut(t, tm, 3*time.Second, "log of crashy/crashy", "exits at start on purpose")
	waitFor(t, 3*time.Second, "the TUI to follow the log", func() bool { return p.followers("crashy/crashy") == 1 })
	p.logLine("crashy/crashy", "a new line 42")
	waitOut(t, tm, time.Second, "a new line 42")
}

// TestUnexpectedEvents: odd events over the real stream change nothing and the
// TUI goes on following it.
func TestUnexpectedEvents(t *testing.T) {
	p, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 80, 24)
	waitOut(t, tm, 5*time.Second, "● live")
	for _, ev := range []api.Event{{}, {Type: "bogus"}, {Type: "server"}, {Type: "finding"}, {Type: "egress"}, {Type: "status"},
		{Type: "server", Server: &api.ServerEvent{Plugin: "ghost", Server: "x", State: "running"}}} {
		p.push(ev)
	}
	p.push(api.Event{Type: "server", Server: &api.ServerEvent{Plugin: "demo", Server: "demo", State: api.StateStarting}})
	waitOut(t, tm, time.Second, "demo/demo is now starting")
	out := finalView(t, tm)
	if !strings.Contains(out, "● live") || !hasRow(out, "demo", "starting") {
		t.Errorf("after odd events:\n%s", out)
	}
}

// TestFilters: '/' narrows the plugins table; 's' narrows findings by severity.
func TestFilters(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live")
	tm.Send(keyMsg("/"))
	tm.Type("crash")
	tm.Send(keyMsg("enter"))
	tm.Send(keyMsg("2"))
	for range 3 {
		tm.Send(keyMsg("s")) // all → warning → error → critical
	}
	waitOut(t, tm, time.Second, "severity ≥ critical")
	tm.Send(keyMsg("1"))
	out := finalView(t, tm)
	if !hasRow(out, "crashy", "backing-off") || strings.Contains(out, "host-health") || strings.Contains(out, "egress-demo") {
		t.Errorf("filter crash:\n%s", out)
	}
	if !strings.Contains(out, "filter: crash") {
		t.Errorf("the filter in force is not shown:\n%s", out)
	}
}

// TestResize: the screen follows the terminal's size, never wider or taller.
func TestResize(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 80, 24)
	waitOut(t, tm, 5*time.Second, "● live")
	for _, size := range [][2]int{{120, 40}, {60, 16}, {100, 30}} {
		tm.Send(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
	}
	tm.Send(keyMsg("enter"))
	out := finalView(t, tm)
	checkScreen(t, out, 100, 30)
}

// TestKeysInOneRead: keys that arrive together ("1g" from a fast typist or a script)
// act one by one.
func TestKeysInOneRead(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live")
	tm.Send(tea.KeyPressMsg{Code: '4', Text: "4"})
	tm.Send(tea.KeyPressMsg{Code: tea.KeyExtended, Text: "1gjjj"})
	out := finalView(t, tm)
	if !strings.Contains(out, "[1 Plugins(8)]") || !hasRow(out, ">", "health", "refused") {
		t.Errorf("\"1gjjj\" did not select host-health/health in the plugins view:\n%s", out)
	}
}

// noFollow is a node without the follow endpoint: only the last lines can be read.
type noFollow struct{ Source }

func (noFollow) Follow(context.Context, string, string) (<-chan string, error) {
	return nil, errors.New("follow: control API: 404 Not Found")
}

// TestFollowFallsBackToLastLines: a node that cannot stream a log still shows its
// last lines, and says it is not following.
func TestFollowFallsBackToLastLines(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := runTUI(t, NewModel(noFollow{NewSocketSource(sock)}, Options{NoColor: true, Socket: sock}), 100, 30)
	waitOut(t, tm, 5*time.Second, "● live")
	tm.Send(tea.KeyPressMsg{Code: tea.KeyExtended, Text: "jjjjjl"})
	waitOut(t, tm, 3*time.Second, "not following: follow: control API: 404 Not Found", "exits at start on purpose")
	tm.Quit()
}
