package tui

import (
	"strings"
	"testing"
	"time"
)

// TestEscWalksBack: Esc closes the help first, then clears the log view's filter,
// then leaves the log for the plugins view it was opened from; on the plugins
// view it closes the detail pane and goes nowhere.
func TestEscWalksBack(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live")
	for range 5 {
		tm.Send(keyMsg("j"))
	}
	tm.Send(keyMsg("l"))
	waitOut(t, tm, 3*time.Second, "log of crashy/crashy", "exits at start on purpose")
	tm.Send(keyMsg("/"))
	tm.Type("starting")
	tm.Send(keyMsg("enter"))
	waitOut(t, tm, time.Second, "filter: starting (esc clears)")
	tm.Send(keyMsg("?"))
	waitOut(t, tm, time.Second, "severity filter")
	tm.Send(keyMsg("esc")) // the help
	tm.Send(keyMsg("esc")) // the filter
	waitOut(t, tm, time.Second, "[5 Log]", "exits at start on purpose")
	tm.Send(keyMsg("esc")) // the log
	waitOut(t, tm, time.Second, "[1 Plugins(8)]")
	tm.Send(keyMsg("enter"))
	waitOut(t, tm, time.Second, "Details  (esc closes")
	tm.Send(keyMsg("esc")) // the detail pane
	tm.Send(keyMsg("esc")) // nothing left: stays
	out := finalView(t, tm)
	if !strings.Contains(out, "[1 Plugins(8)]") || !hasRow(out, ">", "crashy", "backing-off") || strings.Contains(out, "Details") {
		t.Errorf("after Esc on the plugins view:\n%s", out)
	}
}

// TestViewKeysWithoutTarget: the keys a view answers for the root (restart,
// follow, answer) say so when nothing is selected they could apply to.
func TestViewKeysWithoutTarget(t *testing.T) {
	_, _, sock := startNode(t, "tier1.json")
	tm := liveTUI(t, sock, 120, 40)
	waitOut(t, tm, 5*time.Second, "● live")
	for range 10 {
		tm.Send(keyMsg("j")) // claude-hooks' first hook: no server to restart
	}
	tm.Send(keyMsg("r"))
	waitOut(t, tm, time.Second, "select a server first")
	tm.Send(keyMsg("l"))
	tm.Send(keyMsg("7"))
	tm.Send(keyMsg("o"))
	waitOut(t, tm, time.Second, "nothing waits for an answer")
	out := finalView(t, tm)
	if !strings.Contains(out, "[7 Approvals(0)]") || strings.Contains(out, "Restart") {
		t.Errorf("after r, l and o with nothing to act on:\n%s", out)
	}
}
