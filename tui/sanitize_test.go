package tui

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"oz0.ai/node/node/api"
)

// Text a hostile plugin might write where the node passes it on: screen clears and
// cursor moves, a window title, a clipboard write (OSC 52), colour, line breaks
// that forge rows, a carriage return that overwrites one, a bidirectional override
// (Trojan Source), a C1 control and invalid UTF-8.
const (
	hostileClear = "ok\x1b[2J\x1b[H FAKE: every plugin sandboxed\r\nforged row"
	hostileTitle = "title\x1b]0;pwned\x07 done"
	hostileClip  = "clip\x1b]52;c;cm0gLXJmIH4K\x07 done"
	hostileBidi  = "safe \u202etxt.exe\u202c and \u2066isolate\u2069"
	hostileC1    = "c1\u009b31mred\u0085next \xff end"
)

// sgr matches the colour and attribute sequences the TUI's own styles emit.
var sgr = regexp.MustCompile(`\x1b\[[0-9;:]*m`)

// inert reports what in a drawn screen a terminal would act on, beyond the TUI's
// own colours: any other escape or control character, or a bidirectional control.
func inert(screen string) string {
	for _, r := range sgr.ReplaceAllString(screen, "") {
		switch {
		case r == '\n':
		case unicode.IsControl(r):
			return fmt.Sprintf("control character %U", r)
		case isBidiControl(r):
			return "bidirectional control"
		}
	}
	return ""
}

func hostileStatus(t *testing.T) *api.Status {
	st := loadStatus(t, "tier1.json")
	demo := &st.Plugins[0]
	demo.Source = hostileTitle
	demo.Egress = []string{"api.example.com:443 — " + hostileClip}
	demo.Servers[0].Reasons = []string{hostileClear, hostileBidi}
	demo.Servers[0].Reason = hostileC1
	demo.Servers[0].LastErr = []string{hostileClear, hostileTitle}
	demo.Servers[0].Tools = []string{"demo__echo\x1b[8m"}
	st.Findings[0].Message = hostileTitle + " " + hostileClear
	st.Findings[0].Fix = hostileBidi
	st.Exempt[0].Detail = hostileClip
	st.Egress.Recent[0].Rule = hostileClear
	st.Node.Labels["evil\x1b[2J"] = hostileTitle
	// What the node learnt to carry later: a remote server's address, hook grants,
	// hook runs and timeouts, a needs-config fix.
	demo.Servers[0].Remote = "http\x1b[2J"
	demo.Servers[0].Host = hostileTitle
	demo.Servers[0].LogDropped = 3 << 20
	demo.HooksSee = []string{hostileBidi}
	demo.HooksProject = true
	demo.Hooks = append(demo.Hooks, api.Hook{Event: hostileClear, Matcher: hostileC1, Action: "sandboxed", Sandbox: "bwrap", Timeout: 600, Capped: true})
	st.HookGrants = append(st.HookGrants, api.HookGrant{Flag: hostileClip, Watcher: hostileTitle, Other: hostileClear, Matches: "missing\x1b[5m"})
	st.HookRuns = append([]api.HookRun{{Time: "2026-11-29T11:30:00Z", Plugin: "demo", Event: hostileBidi, Tool: hostileC1, Decision: "deny\x1b[0m", Reason: hostileClear, Seconds: 0.5}}, st.HookRuns...)
	st.Findings = append(st.Findings, api.Finding{Code: api.CodeNeedsConfig, Severity: api.SevWarning, Subject: "demo/demo", Message: hostileTitle, Fix: "oz0-node plugin config demo " + hostileClip})
	return st
}

// TestPluginTextIsInert: plugin-supplied text — in the status, in events the node
// pushes later and in a followed log — reaches the screen with nothing a terminal
// would act on, in colour and without, and never adds or moves a row.
func TestPluginTextIsInert(t *testing.T) {
	for _, noColor := range []bool{false, true} {
		p := newProvider(hostileStatus(t))
		p.logs["demo/demo"] = []string{hostileClip, hostileTitle}
		sock := shortTempDir(t) + "/control.sock"
		serve(t, p, sock)
		const w, h = 120, 40
		tm := runTUI(t, NewModel(NewSocketSource(sock), Options{NoColor: noColor, Socket: sock, Now: func() time.Time { return fixedNow }}), w, h)
		waitOut(t, tm, 5*time.Second, "● live")
		p.push(api.Event{Type: "server", Server: &api.ServerEvent{Plugin: "demo", Server: "demo", State: api.StateCrashed, Detail: hostileClear}})
		p.push(api.Event{Type: "finding", Finding: &api.Finding{Code: "evil\x1b[5m", Severity: api.SevError, Subject: "demo/demo", Message: hostileBidi}})
		p.push(api.Event{Type: "egress", Egress: &api.EgressDecision{Plugin: "demo", Host: "x\x1b[2Jy", Port: 443, Decision: "deny", Rule: hostileTitle}})
		// The waits match what shows whether or not the text was cleaned: the checks
		// below, not a timeout, are what fails when it was not.
		waitOut(t, tm, 3*time.Second, "demo/demo is now crashed")
		for _, k := range []string{"j", "enter", "G", "esc", "2", "3", "4", "1", "l"} {
			tm.Send(keyMsg(k))
		}
		waitOut(t, tm, 3*time.Second, "log of demo/demo", "following", "clip")
		waitFor(t, 3*time.Second, "the TUI to follow the log", func() bool { return p.followers("demo/demo") == 1 })
		p.logLine("demo/demo", "late line "+hostileC1)
		waitOut(t, tm, 3*time.Second, "late line")
		frames := append(tm.rec.allFrames(), finalView(t, tm))
		for _, f := range frames {
			if !strings.Contains(ansi.Strip(f), "live") {
				continue // drawn before the terminal's size and the node's status came
			}
			if what := inert(f); what != "" {
				t.Fatalf("colour %v: a screen holds a %s:\n%q", !noColor, what, f)
			}
			if n := len(strings.Split(f, "\n")); n != h {
				t.Fatalf("colour %v: a screen has %d rows, want %d:\n%s", !noColor, n, h, f)
			}
			for _, l := range strings.Split(f, "\n") {
				if lw := lipgloss.Width(l); lw > w {
					t.Fatalf("colour %v: a row %d wide: %q", !noColor, lw, l)
				}
			}
		}
		out, _ := io.ReadAll(tm.FinalOutput(t))
		for _, seq := range []string{"\x1b]0;pwned", "\x1b]52;", "\x1b[2J\x1b[H FAKE", "\u202e"} {
			if bytes.Contains(out, []byte(seq)) {
				t.Errorf("colour %v: the terminal was sent %q", !noColor, seq)
			}
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":        "plain text",
		hostileClear:        "ok FAKE: every plugin sandboxed  forged row",
		hostileTitle:        "title done",
		hostileBidi:         "safe txt.exe and isolate",
		hostileC1:           "c1rednext \uFFFD end",
		"tab\there":         "tab here",
		"ünïcödé ✓ 日本":      "ünïcödé ✓ 日本",
		"del\x7fete\x00nul": "deletenul",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCleanAllReachesEveryString: every string in a status — nested, in slices, in
// map keys and values, of named string types — comes out as oneLine makes it.
func TestCleanAllReachesEveryString(t *testing.T) {
	st := hostileStatus(t)
	st.Findings[0].Severity = "error\x1b[0m"
	ev := api.Event{Type: "status\x1b", Status: st}
	cleanAll(&ev)
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem(), path)
			}
		case reflect.String:
			if s := v.String(); s != oneLine(s) || inert(s) != "" {
				t.Errorf("%s = %q was not cleaned", path, s)
			}
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i), path+"[]")
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(k, path+" key")
				walk(v.MapIndex(k), path+"["+k.String()+"]")
			}
		}
	}
	walk(reflect.ValueOf(ev), "event")
	if st.Node.Labels["evil"] != "title done" {
		t.Errorf("labels: %q", st.Node.Labels)
	}
}

// isBidiControl reports the characters that reorder text on screen (Trojan
// Source): embeddings, overrides, isolates and the implicit marks. The test keeps
// its own list so that it checks the sanitizer rather than trusting it.
func isBidiControl(r rune) bool {
	switch {
	case r == '\u061C', r == '\u200E', r == '\u200F':
		return true
	case r >= '\u202A' && r <= '\u202E':
		return true
	case r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}
