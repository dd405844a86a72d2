package tui

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"oz0.ai/node/internal/golden"
)

// screen runs the TUI under teatest at w×h against a recorded status served by the
// real control API, types keys once the status shows, and returns the final screen.
func screen(t *testing.T, status string, w, h int, keys []string, wait string) string {
	t.Helper()
	p := newProvider(loadStatus(t, status))
	p.logs["crashy/crashy"] = []string{"crashy: starting", "SystemExit: crashy: exits at start on purpose"}
	sock := filepath.Join(shortTempDir(t), "control.sock")
	serve(t, p, sock)

	m := NewModel(NewSocketSource(sock), Options{NoColor: true, Now: func() time.Time { return fixedNow }, Socket: sock, DataDir: "/var/lib/oz0-node"})
	tm := runTUI(t, m, w, h)
	waitOut(t, tm, 5*time.Second, "oz0-node", "live")
	for _, k := range keys {
		tm.Send(keyMsg(k))
	}
	if wait != "" {
		// Some keys start work outside the event loop (following a log): wait for it.
		waitOut(t, tm, 5*time.Second, wait)
	}
	// Quit goes through the same queue as the keys: the final model has seen them all.
	return finalView(t, tm)
}

// keyMsg turns a key name as KeyMap spells it into the message a terminal sends.
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	}
	r := []rune(k)
	if len(r) != 1 {
		panic("keyMsg: one key at a time: " + k)
	}
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

// goldenViews are the screens committed as text captures of each view.
var goldenViews = []struct {
	name string
	keys []string
	wait string
}{
	{"plugins", nil, ""},
	// j×3 lands on host-health/health: the refused server and its copy-ready flag.
	{"plugins-refused", []string{"j", "j", "j"}, ""},
	{"detail-refused", []string{"j", "j", "j", "enter"}, ""},
	{"detail-crash", []string{"j", "j", "j", "j", "j", "enter"}, ""},
	{"detail-egress", []string{"j", "j", "j", "j", "j", "j", "enter", "G"}, ""},
	// j×8 lands on claude-hooks: hook timeouts, what its hooks see, its recent runs.
	{"detail-hooks", []string{"j", "j", "j", "j", "j", "j", "j", "j", "enter"}, ""},
	// The last two plugins: a remote server, and one that needs the operator's value.
	{"detail-remote", []string{"G", "k", "k", "enter"}, ""},
	{"plugins-needs-config", []string{"G"}, ""},
	{"detail-needs-config", []string{"G", "enter"}, ""},
	{"findings", []string{"2"}, ""},
	{"findings-errors", []string{"2", "s", "s"}, ""},
	{"exemptions", []string{"3", "j"}, ""},
	{"egress", []string{"4"}, ""},
	{"log", []string{"j", "j", "j", "j", "j", "l"}, "exits at start on purpose"},
	{"help", []string{"?"}, ""},
}

func TestGoldenTier1(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		for _, v := range goldenViews {
			t.Run(fmt.Sprintf("%dx%d/%s", size[0], size[1], v.name), func(t *testing.T) {
				out := screen(t, "tier1.json", size[0], size[1], v.keys, v.wait)
				checkScreen(t, out, size[0], size[1])
				golden.Check(t, t.Name()+".golden", out+"\n")
			})
		}
	}
}

func TestGoldenTier0(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		for _, v := range []struct {
			name string
			keys []string
		}{{"plugins", nil}, {"findings", []string{"2"}}, {"exemptions", []string{"3"}}, {"egress", []string{"4"}}} {
			t.Run(fmt.Sprintf("%dx%d/%s", size[0], size[1], v.name), func(t *testing.T) {
				out := screen(t, "tier0.json", size[0], size[1], v.keys, "")
				checkScreen(t, out, size[0], size[1])
				if !strings.Contains(out, "TIER 0 — NO PLUGIN SANDBOX") {
					t.Errorf("tier-0 banner missing:\n%s", out)
				}
				golden.Check(t, t.Name()+".golden", out+"\n")
			})
		}
	}
}

// checkScreen holds every screen to the terminal's size: no line wider, no more lines.
func checkScreen(t *testing.T, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) != h {
		t.Errorf("screen has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > w {
			t.Errorf("line %d is %d cells wide, more than %d: %q", i+1, n, w, l)
		}
		if strings.Contains(l, "\x1b[") {
			t.Errorf("line %d holds an escape sequence under the ASCII profile: %q", i+1, l)
		}
	}
}

// On the Landlock tier the header names the backend and lists each gap the node
// states on a line of its own (a small terminal keeps one line and marks the rest).
func TestLandlockTierListsWhatItDoesNotCover(t *testing.T) {
	gaps := []string{
		"Landlock shares the host kernel: a kernel exploit escapes the sandbox",
		"Landlock tier, no PID namespace: the tool sees every host process in /proc",
		"Landlock tier, no mount namespace: outside the allowlist whether a file exists stays visible",
		"Landlock tier, no IPC namespace: System V IPC and POSIX message queues are refused",
		"Landlock tier, no network namespace: no transparent egress and no DNS inside",
		"Landlock tier: TCP connect is allowed by port, not address",
	}
	for _, size := range [][2]int{{120, 40}, {80, 24}} {
		st := loadStatus(t, "tier1.json")
		st.Node.Backend, st.Node.NotCovers = "landlock", gaps
		p := newProvider(st)
		sock := filepath.Join(shortTempDir(t), "control.sock")
		serve(t, p, sock)
		m := NewModel(NewSocketSource(sock), Options{NoColor: true, Now: func() time.Time { return fixedNow }, Socket: sock, DataDir: "/var/lib/oz0-node"})
		tm := runTUI(t, m, size[0], size[1])
		waitOut(t, tm, 5*time.Second, "oz0-node", "live")
		out := finalView(t, tm)
		checkScreen(t, out, size[0], size[1])
		if !strings.Contains(out, "backend landlock") {
			t.Errorf("%dx%d: the header does not name the Landlock backend:\n%s", size[0], size[1], out)
		}
		if size[1] < 30 {
			if !strings.Contains(out, "not covered: Landlock shares the host kernel") {
				t.Errorf("%dx%d: the header does not start the list:\n%s", size[0], size[1], out)
			}
			continue
		}
		for _, g := range gaps {
			if !strings.Contains(out, "  - "+g) {
				t.Errorf("%dx%d: the header does not list %q:\n%s", size[0], size[1], g, out)
			}
		}
	}
}
