package agentsetup

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// userDocs are settings files as users write them by hand: other indents, tabs,
// one line, CRLF, escapes, their own hooks on the events the node registers, and
// the node's entry moved into a group of their own.
var userDocs = map[string]string{
	"four spaces": "{\n    \"model\": \"opus\",\n    \"env\": {\"A\": \"1\"}\n}\n",
	"tabs":        "{\n\t\"hooks\": {\n\t\t\"Stop\": [\n\t\t\t{\"hooks\": [{\"type\": \"command\", \"command\": \"say done\"}]}\n\t\t]\n\t}\n}",
	"one line":    `{"permissions":{"allow":["Bash(ls)"]},"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"check.sh"}]}]}}`,
	"crlf":        "{\r\n  \"model\": \"sonnet\",\r\n  \"x\": {}\r\n}\r\n",
	"escapes":     "{\n  \"statusLine\": {\"command\": \"echo \\u00e9 \\\"x\\\" </b>\"},\n  \"x\": [1, 2.50, 1e3]\n}\n",
	"no trailing newline, spaces after colon and in empty object": "{ \"a\" :  { } , \"b\":[ ] }",
	"user groups around": "{\n  \"hooks\": {\n    \"PostToolUse\": [\n      {\"matcher\": \"Write\", \"hooks\": [{\"type\": \"command\", \"command\": \"fmt.sh\"}]},\n      {\"matcher\": \"Edit\", \"hooks\": [{\"type\": \"command\", \"command\": \"lint.sh\"}]}\n    ]\n  }\n}\n",
	"comments of a sort": "{\n  \"// note\": \"keep me\",\n  \"hooks\": {\"SessionStart\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"hi.sh\", \"timeout\": 5}]}]}\n}\n",
}

// What the user wrote keeps its bytes: setup adds the node's entries around it,
// and --remove gives the file back exactly as it was, whatever its layout.
func TestMergeKeepsWhatTheUserWroteByteForByte(t *testing.T) {
	for name, doc := range userDocs {
		t.Run(name, func(t *testing.T) {
			out, changes, err := MergeSettings([]byte(doc), testNode, testHooks, false)
			if err != nil || len(changes) == 0 {
				t.Fatalf("setup: %v %v", changes, err)
			}
			if !json.Valid(out) {
				t.Fatalf("setup wrote no JSON:\n%s", out)
			}
			var before, after map[string]any
			json.Unmarshal([]byte(doc), &before)
			json.Unmarshal(out, &after)
			for k, v := range before {
				if k != "hooks" && !reflect.DeepEqual(after[k], v) {
					t.Errorf("setup changed %q: %v → %v", k, v, after[k])
				}
			}
			for _, r := range testHooks {
				if !strings.Contains(string(out), r.Event) {
					t.Errorf("no entry for %s:\n%s", r.Event, out)
				}
			}
			back, _, err := MergeSettings(out, testNode, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			if string(back) != doc {
				t.Errorf("--remove gave back\n%q\nnot\n%q", back, doc)
			}
			mcp, _, err := MergeMCP([]byte(doc), testNode, false)
			if err != nil || !json.Valid(mcp) {
				t.Fatalf("MCP entry: %v\n%s", err, mcp)
			}
			if back, _, _ := MergeMCP(mcp, testNode, true); string(back) != doc {
				t.Errorf("MCP --remove gave back\n%q\nnot\n%q", back, doc)
			}
		})
	}
}

// The node's entries follow its plugins: an event no plugin handles any more
// loses its entry, a changed matcher is rewritten where the entry stands (the
// user's groups around it keep their places), a new event gets one; the user's
// own entries are never touched.
func TestSettingsFollowThePlugins(t *testing.T) {
	doc := userDocs["user groups around"]
	out, _, err := MergeSettings([]byte(doc), testNode, testHooks, false)
	if err != nil {
		t.Fatal(err)
	}
	// The user adds a group after the node's.
	out = insert(out, lookup(out, "hooks", "PostToolUse"), "", []byte(`{"matcher": "Read", "hooks": [{"type": "command", "command": "audit.sh"}]}`))
	if !json.Valid(out) {
		t.Fatalf("test edit broke the file:\n%s", out)
	}
	next := []Registration{{Event: "PostToolUse", Matcher: "Write"}, {Event: "Stop"}}
	out2, changes, err := MergeSettings(out, testNode, next, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`added for 1 events: Stop`,
		`updated for 1 events: PostToolUse (Write)`,
		`removed from 3 events: SessionStart, UserPromptSubmit, PreToolUse`,
	}
	if got := strings.Join(changes, "\n"); len(changes) != 3 || !strings.Contains(got, want[0]) || !strings.Contains(got, want[1]) || !strings.Contains(got, want[2]) {
		t.Errorf("changes:\n%s", got)
	}
	var s struct {
		Hooks map[string][]hookGroup `json:"hooks"`
	}
	if err := json.Unmarshal(out2, &s); err != nil {
		t.Fatal(err)
	}
	post := s.Hooks["PostToolUse"]
	if len(post) != 4 || post[0].Hooks[0].Command != "fmt.sh" || post[1].Hooks[0].Command != "lint.sh" ||
		post[2].Matcher != "Write" || post[2].Hooks[0].Command != testNode.HookCommand() || post[3].Hooks[0].Command != "audit.sh" {
		t.Logf("%s", out2)
		t.Errorf("PostToolUse groups: %+v", post)
	}
	if len(s.Hooks) != 2 {
		t.Errorf("events: %v", s.Hooks)
	}
	if again, changes, _ := MergeSettings(out2, testNode, next, false); string(again) != string(out2) || changes != nil {
		t.Errorf("a second run changed %v", changes)
	}
	// A node with no hooks at all leaves only the user's.
	none, _, _ := MergeSettings(out2, testNode, nil, false)
	if strings.Contains(string(none), "oz0-node") || !strings.Contains(string(none), "audit.sh") {
		t.Errorf("no plugin hooks:\n%s", none)
	}
}

// The node's entry inside a group of the user's (moved there by hand) is taken
// out of it, and the user's hooks in that group stay.
func TestOurEntryInAUserGroupIsTakenOut(t *testing.T) {
	doc := `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"check.sh"},{"type":"command","command":"oz0-node hook","timeout":90}]}]}}`
	out, _, err := MergeSettings([]byte(doc), testNode, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"check.sh"}]}]}}`; string(out) != want {
		t.Errorf("got %s", out)
	}
}

// Any settings file that is a JSON object comes out of setup as JSON, with the
// user's settings as they were, and --remove gives it back byte for byte unless
// it already held entries of the node's or empty hook lists (which --remove
// takes away).
func FuzzMergeRoundTrip(f *testing.F) {
	for _, d := range userDocs {
		f.Add(d)
	}
	f.Add(`{}`)
	f.Add(`{"hooks":{"Stop":[]}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		var v map[string]any
		if json.Unmarshal([]byte(doc), &v) != nil || v == nil {
			return
		}
		out, _, err := MergeSettings([]byte(doc), testNode, testHooks, false)
		if err != nil {
			return // a "hooks" that is no object, an event that is no array
		}
		var after map[string]any
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("setup wrote no JSON object: %v\n%q → %q", err, doc, out)
		}
		for k, val := range v {
			if k != "hooks" && !reflect.DeepEqual(after[k], val) {
				t.Fatalf("setup changed %q\n%q → %q", k, doc, out)
			}
		}
		back, _, err := MergeSettings(out, testNode, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		// What --remove cannot know was not the node's: a hooks object or an
		// event list that was empty before setup filled it, and the blanks inside
		// an empty file's braces.
		if strings.Contains(doc, "oz0-node") || emptyHooks(v["hooks"]) || len(v) == 0 {
			return
		}
		if string(back) != doc {
			t.Fatalf("--remove gave back\n%q\nnot\n%q", back, doc)
		}
	})
}

// emptyHooks reports whether a settings "hooks" value is an empty object or holds
// an empty list.
func emptyHooks(h any) bool {
	m, ok := h.(map[string]any)
	if !ok {
		return false
	}
	if len(m) == 0 {
		return true
	}
	for _, v := range m {
		if l, ok := v.([]any); ok && len(l) == 0 {
			return true
		}
	}
	return false
}
