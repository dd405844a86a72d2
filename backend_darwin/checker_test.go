package backenddarwin

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"oz0.ai/node/node/sandbox"
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
	before := func(p *Profile, rule string) { p.Text = p.Text[:denies] + rule + "\n" + p.Text[denies:] }
	paramOf := func(p *Profile, value string) string {
		for _, prm := range p.Params {
			if prm.Value == value {
				return prm.Name
			}
		}
		t.Fatalf("no parameter for %s", value)
		return ""
	}
	mutations := map[string]func(p *Profile){
		"home entry writable": func(p *Profile) {
			p.Text = strings.Replace(p.Text, "(deny file-write* (with message \"oz0-sandbox:demo\")\n  (literal (param \"HOME_DIR\"))\n)\n", "", 1)
		},
		"homes folder writable": func(p *Profile) {
			before(p, `(allow file-write* (subpath (param "`+paramOf(p, goldenData+"/homes")+`")))`)
		},
		"homebrew readable whole": func(p *Profile) {
			before(p, `(allow file-read* (subpath (param "`+paramOf(p, "/opt/homebrew")+`")))`)
		},
		"usr local etc readable": func(p *Profile) {
			before(p, `(allow file-read* (subpath (param "`+paramOf(p, "/usr/local/etc")+`")))`)
		},
		"trustd not granted": func(p *Profile) {
			before(p, `(allow mach-lookup (global-name "com.apple.trustd.agent"))`)
		},
		"logger": func(p *Profile) { before(p, `(allow mach-lookup (global-name "com.apple.system.logger"))`) },
		"notification center": func(p *Profile) {
			before(p, `(allow mach-lookup (global-name "com.apple.system.notification_center"))`)
		},
		"no mach-host":  func(p *Profile) { p.Text = strings.Replace(p.Text, "(allow mach-host*)\n", "", 1) },
		"no semaphores": func(p *Profile) { p.Text = strings.Replace(p.Text, "(allow ipc-posix-sem)\n", "", 1) },
		"no ancestor stat": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `(literal (param "`+paramOf(p, "/usr/local")+`"))`, `(literal (param "ROOT"))`, 1)
		},
		"no root link stat": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `(literal (param "LINK_1"))`, `(literal (param "ROOT"))`, 1)
			p.Params = slices.DeleteFunc(p.Params, func(prm Param) bool { return prm.Name == "LINK_1" })
		},
		"no stdout": func(p *Profile) {
			p.Text = strings.Replace(p.Text, "(literal (param \"DEV_2\"))\n  (literal (param \"DEV_3\"))\n)", "(literal (param \"DEV_3\"))\n)", 1)
		},
		"no /dev/fd": func(p *Profile) {
			p.Text = strings.Replace(p.Text, `(allow file-read* file-write-data (subpath (param "DEV_FD")))`, `(allow file-read* (subpath (param "DEV_FD")))`, 1)
		},
		"socket outside the home": func(p *Profile) {
			before(p, `(allow network-outbound (remote unix-socket (subpath (param "`+paramOf(p, goldenData+"/plugins")+`"))))`)
		},
		"node sockets reachable": func(p *Profile) {
			before(p, `(allow network-outbound (remote unix-socket (subpath (param "DATA_DIR"))))`)
		},
		"no home sockets": func(p *Profile) {
			p.Text = strings.Replace(p.Text, "(allow network-bind network-inbound\n  (local unix-socket (subpath (param \"HOME_DIR\")))\n)\n", "", 1)
		},
		"terminal for a server": func(p *Profile) {
			p.Params = append(p.Params, Param{"TTY", "/dev/tty"})
			before(p, `(allow file-write-data (literal (param "TTY")))`)
		},
		"hard-coded xcode": func(p *Profile) {
			p.Params = append(p.Params, Param{"XCODE", "/Applications/Xcode.app/Contents/Developer"})
			before(p, `(allow process-exec (subpath (param "XCODE")))`)
		},
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

// macLinks models a Mac's symlinks for the renderer (Canonical) while a test runs.
func macLinks(t *testing.T, links map[string]string) {
	t.Helper()
	old := resolve
	resolve = func(p string) (string, error) {
		c := &checked{links: links}
		return c.resolve(p, true), nil
	}
	t.Cleanup(func() { resolve = old })
}

// The escape: a plugin removes its home and puts a link in its place, so the next
// render would grant whatever the link points to. The profile keeps the home's
// entry (and each folder on the way to it) out of the plugin's reach, and the
// renderer refuses a home that is a link anyway.
func TestHomeThatIsALinkIsRefused(t *testing.T) {
	for _, target := range []string{"/Users/dev/Library/LaunchAgents", "/Users/dev/.ssh", goldenData + "/logs", goldenData + "/homes/other-plugin"} {
		t.Run(path.Base(target), func(t *testing.T) {
			s := fixtureSpec(t, "demo", nil)
			macLinks(t, map[string]string{s.Home: target})
			_, err := RenderProfile(s)
			if !errors.Is(err, ErrUnrepresentable) || !strings.Contains(err.Error(), "is a link") {
				t.Fatalf("home linked to %s: got %v, want a refusal naming the link", target, err)
			}
		})
	}
	// A link above the data folder (an operator's choice, e.g. a moved Library) is
	// followed: every path is canonical through it, and the home is still no link.
	s := fixtureSpec(t, "demo", nil)
	macLinks(t, map[string]string{"/Users/dev/Library": "/Volumes/Data/dev-library"})
	p, err := RenderProfile(s)
	if err != nil {
		t.Fatalf("data folder below a linked folder: %v", err)
	}
	if !slices.Contains(p.Params, Param{"HOME_DIR", "/Volumes/Data/dev-library/Application Support/oz0-node/homes/demo"}) {
		t.Errorf("home not canonical through the operator's link: %v", p.Params)
	}
	// argv and env carry the same spelling as the parameters.
	argv, err := Argv(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(argv, "/Volumes/Data/dev-library/Application Support/oz0-node/plugins/demo/0123456789abcdef0123456789abcdef01234567/server.py") {
		t.Errorf("argv keeps the linked spelling: %q", argv)
	}
	env, _ := Env(s, Options{})
	for _, want := range []string{"HOME=/Volumes/Data/dev-library/Application Support/oz0-node/homes/demo", "TMPDIR=/Volumes/Data/dev-library/Application Support/oz0-node/homes/demo/tmp"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %q", want, env)
		}
	}
}

// A writable mount that is a link is refused the same way.
func TestWritableMountThatIsALinkIsRefused(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	rw := goldenData + "/homes/demo-cache"
	s.Mounts = append(s.Mounts, sandbox.Mount{Source: rw, Dest: rw, Writable: true})
	macLinks(t, map[string]string{rw: "/Users/dev/.ssh"})
	if _, err := RenderProfile(s); !errors.Is(err, ErrUnrepresentable) {
		t.Fatalf("writable mount linked to ~/.ssh: got %v, want a refusal", err)
	}
}
