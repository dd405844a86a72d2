package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in        string
		desc, hint, bod string
		bad             bool
	}{
		{"review", "---\ndescription: Review a pull request\nargument-hint: \"[pr-number]\"\nallowed-tools: Bash(gh pr view:*)\n---\n\nReview PR $1 and say what is wrong.\n",
			"Review a pull request", "[pr-number]", "Review PR $1 and say what is wrong.", false},
		{"plain", "# Explain the code\nExplain $ARGUMENTS simply.", "Explain the code", "", "# Explain the code\nExplain $ARGUMENTS simply.", false},
		{"crlf", "---\r\ndescription: x\r\n---\r\nbody\r\n", "x", "", "body", false},
		{"open-front", "---\ndescription: x\nbody", "", "", "", true},
		{"empty", "---\ndescription: x\n---\n  \n", "", "", "", true},
		{"bad name!", "body", "", "", "", true},
		{"../escape", "body", "", "", "", true},
	} {
		got, err := Parse(c.name, []byte(c.in))
		if (err != nil) != c.bad {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if c.bad {
			continue
		}
		if got.Description != c.desc || got.ArgumentHint != c.hint || got.Body != c.bod {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
}

func TestRender(t *testing.T) {
	c := Command{Body: "Fix issue $1 in $2 ($ARGUMENTS); $3 stays empty; $ARGUMENTS again"}
	if got := c.Render(" 42  api "); got != "Fix issue 42 in api (42  api);  stays empty; 42  api again" {
		t.Errorf("%q", got)
	}
}

// Commands are read beneath the plugin's folder only: a link out is not followed.
func TestLoadStaysInThePluginFolder(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "commands", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "commands", "hello.md"), []byte("---\ndescription: Say hello\n---\nSay hello to $ARGUMENTS."), 0o644)
	os.WriteFile(filepath.Join(dir, "commands", "notes.txt"), []byte("not a command"), 0o644)
	secret := filepath.Join(t.TempDir(), "secret.md")
	os.WriteFile(secret, []byte("the node's secret"), 0o644)
	os.Symlink(secret, filepath.Join(dir, "commands", "leak.md"))
	cmds, errs := Load(dir)
	if len(cmds) != 1 || cmds[0].Name != "hello" || cmds[0].Description != "Say hello" {
		t.Errorf("commands %+v", cmds)
	}
	for _, c := range cmds {
		if strings.Contains(c.Body, "secret") {
			t.Errorf("a link out of the plugin was read: %+v", c)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "leak.md") {
		t.Errorf("errors %v", errs)
	}
	if cmds, errs := Load(t.TempDir()); len(cmds) != 0 || len(errs) != 0 {
		t.Errorf("no commands folder: %v %v", cmds, errs)
	}
}
