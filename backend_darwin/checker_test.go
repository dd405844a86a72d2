package backenddarwin

import (
	"strings"
	"testing"
)

// The checks must be able to fail: each mutation of a good profile breaks one
// promise, and checkProfile must say so.
func TestChecksCatchBrokenProfiles(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	good, err := RenderProfile(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkProfile(good, s); err != nil {
		t.Fatalf("the good profile fails: %v", err)
	}
	denies := strings.Index(good.Text, "; Denies last")
	mutations := map[string]func(p *Profile){
		"unbalanced":        func(p *Profile) { p.Text += "(allow process-fork" },
		"newline in string": func(p *Profile) { p.Text += "(allow mach-lookup (global-name \"a\nb\"))\n" },
		"bad escape":        func(p *Profile) { p.Text += `(allow mach-lookup (global-name "a\nb"))` + "\n" },
		"unknown operation": func(p *Profile) { p.Text += "(allow iokit-open (iokit-user-client-class \"x\"))\n" },
		"unknown filter":    func(p *Profile) { p.Text += "(allow file-read* (regex #\"^/\"))\n" },
		"no deny default":   func(p *Profile) { p.Text = strings.Replace(p.Text, "(deny default", "(allow default", 1) },
		"unfiltered allow": func(p *Profile) {
			p.Text = strings.Replace(p.Text, "; Denies last", "(allow file-read*)\n; Denies last", 1)
		},
		"spliced path": func(p *Profile) { p.Text += `(allow file-read* (subpath "/Users"))` + "\n" },
		"allow the data folder": func(p *Profile) {
			p.Text = p.Text[:denies] + "(allow file-read* (subpath (param \"DATA_DIR\")))\n" + p.Text[denies:]
		},
		"allow after denies": func(p *Profile) { p.Text += "(allow file-read* (subpath (param \"PLUGIN_DIR\")))\n" },
		"key readable": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `  (subpath (param "DENY_1"))`+"\n", "", 1)
			p.Text = strings.Replace(p.Text, `(require-not (subpath (param "HOME_DIR")))`, `(require-not (subpath (param "HOME_DIR"))) (require-not (subpath (param "DENY_1")))`, 1)
		},
		"other plugin readable": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `(require-not (subpath (param "HOME_DIR")))`, `(require-not (subpath (param "HOME_DIR"))) (require-not (subpath (param "DENY_0")))`, 1)
			p.Text = strings.Replace(p.Text, `  (subpath (param "DENY_0"))`+"\n", "", 1)
		},
		"plugin folder writable": func(p *Profile) {
			p.Text = strings.Replace(p.Text, "(allow file-write*\n", "(allow file-write*\n  (subpath (param \"PLUGIN_DIR\"))\n", 1)
		},
		"any outbound":       func(p *Profile) { p.Text = strings.Replace(p.Text, `"localhost:41873"`, `"*:41873"`, 1) },
		"other port":         func(p *Profile) { p.Text = strings.Replace(p.Text, `"localhost:41873"`, `"localhost:22"`, 1) },
		"second outbound":    func(p *Profile) { p.Text += "(allow network-outbound (remote ip \"localhost:41873\"))\n" },
		"/tmp not canonical": func(p *Profile) { p.Params[len(p.Params)-1].Value = "/tmp/x" },
		"undefined param":    func(p *Profile) { p.Params = p.Params[:len(p.Params)-1] },
		"unused param":       func(p *Profile) { p.Params = append(p.Params, Param{"EXTRA", "/x"}) },
		"untagged deny": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `(deny network-outbound (with message "oz0-sandbox:demo")`, `(deny network-outbound`, 1)
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			p := Profile{Text: good.Text, Params: append([]Param(nil), good.Params...)}
			mutate(&p)
			if p.Text == good.Text && len(p.Params) == len(good.Params) && p.Params[len(p.Params)-1] == good.Params[len(good.Params)-1] {
				t.Fatal("mutation changed nothing")
			}
			if _, err := checkProfile(p, s); err == nil {
				t.Errorf("checks passed a broken profile:\n%s", p.Text)
			} else {
				t.Log(err)
			}
		})
	}
}
