package policy

import (
	"strings"
	"testing"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

// A missing value holds back exactly the server or hook that uses it, in every
// mode (an exempt or unsandboxed server needs its values too), with a finding
// naming the key and the command that sets it.
func TestMissingValueRefusesOnlyWhatUsesIt(t *testing.T) {
	for _, mode := range []Mode{Strict, Auto, Off} {
		in := linuxRoot()
		in.Mode = mode
		in.Unresolved = []manifest.Unresolved{
			{Server: "main", Hook: -1, Field: "env.TOKEN", Name: "user_config.api_token"},
			{Hook: 0, Field: "command", Name: "user_config.hook_key"},
		}
		d := Decide(in)
		main, _ := d.Server("main")
		if main.Action != Refused || !strings.Contains(main.Refusal(), "oz0-node plugin config demo api_token=") {
			t.Errorf("%s: main %s %q, want refused naming the command", mode, main.Action, main.Refusal())
		}
		if d.Hooks[0].Action != Refused || !strings.Contains(d.Hooks[0].Refusal(), "hook_key") {
			t.Errorf("%s: hook %s %q, want refused naming hook_key", mode, d.Hooks[0].Action, d.Hooks[0].Refusal())
		}
		var subjects []string
		for _, f := range d.Findings {
			if f.Code == api.CodeNeedsConfig {
				subjects = append(subjects, f.Subject)
				if !strings.HasPrefix(f.Fix, "oz0-node plugin config demo ") {
					t.Errorf("%s: fix %q", mode, f.Fix)
				}
			}
		}
		if strings.Join(subjects, ",") != "demo/main,demo/PreToolUse[0]" {
			t.Errorf("%s: needs-config findings for %v", mode, subjects)
		}
	}
	// Without unresolved references nothing changes.
	d := Decide(linuxRoot())
	if main, _ := d.Server("main"); main.Action != Sandboxed {
		t.Errorf("main %s without missing values", main.Action)
	}
}

// A value that is set but refused once expanded (a URL that is not one) holds the
// server back and says what is wrong, without naming a key to set.
func TestRefusedValueSaysWhatIsWrong(t *testing.T) {
	in := linuxRoot()
	in.Unresolved = []manifest.Unresolved{{Server: "main", Hook: -1, Field: "url", Problem: "not an http(s) URL"}}
	d := Decide(in)
	main, _ := d.Server("main")
	if main.Action != Refused || !strings.Contains(main.Refusal(), "url: not an http(s) URL") {
		t.Errorf("main %s %q", main.Action, main.Refusal())
	}
}
