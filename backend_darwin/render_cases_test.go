package backenddarwin

import (
	"fmt"
	"strings"
	"testing"

	"oz0.ai/node/internal/golden"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// renderCase is one Spec and host facts whose rendering (or refusal) is pinned
// byte for byte in testdata/render-cases.golden: the profile, its parameters,
// the canonical argv and environment, or the error's text. It pins the renderer's
// whole output, refusals included, so that a change to its structure that should
// change nothing is proven to change nothing.
type renderCase struct {
	name  string
	spec  func(t *testing.T) *sandbox.Spec
	opts  Options
	links map[string]string // the Mac's symlinks, when the case needs some
}

func renderCases() []renderCase {
	const d = "/Users/u/oz0"
	hand := func(edit func(s *sandbox.Spec)) func(t *testing.T) *sandbox.Spec {
		return func(*testing.T) *sandbox.Spec {
			s := handSpec(d, d+"/plugins/p/c", d+"/homes/p", "/opt/homebrew/opt/node@22", d+"/homes/q")
			s.Plugin = "p"
			s.Env = []string{"HOME=" + d + "/homes/p", "TMPDIR=" + d + "/homes/p/tmp", "PATH=" + sandbox.DarwinPath, "SCRIPT=" + d + "/plugins/p/c/x.py"}
			if edit != nil {
				edit(s)
			}
			return s
		}
	}
	var cases []renderCase
	// A fixed list, not fixtures.Valid(): a fixture added later must not change
	// this file (TestProfileEveryFixture checks every fixture).
	for _, name := range []string{"agent-hooks", "claude-hooks", "crashy", "crowded", "demo", "egress-demo", "egress-raw",
		"egress-split", "hook-spy", "host-health", "needs-config", "npm-postinstall-marker", "own-sandbox",
		"py-build-marker", "remote-mcp", "twin-one", "twin-two", "unruly"} {
		cases = append(cases, renderCase{name: "fixture " + name, opts: Options{DeveloperDir: clt}, spec: func(t *testing.T) *sandbox.Spec {
			s, err := fixtureSpecErr(t, name)
			if err != nil {
				return nil
			}
			return s
		}})
	}
	for _, c := range goldenCases {
		cases = append(cases, renderCase{name: "golden " + c.name, opts: c.opts, spec: func(t *testing.T) *sandbox.Spec {
			s := fixtureSpec(t, c.fixture, c.edit)
			if c.spec != nil {
				c.spec(s)
			}
			return s
		}})
	}
	cases = append(cases,
		renderCase{name: "hand", spec: hand(nil)},
		renderCase{name: "hand preview without a port", opts: Options{Preview: true}, spec: hand(func(s *sandbox.Spec) { s.Proxy = nil })},
		renderCase{name: "hand no network", spec: hand(func(s *sandbox.Spec) { s.Network, s.Proxy = policy.NetNone, nil })},
		renderCase{name: "hand empty network", spec: hand(func(s *sandbox.Spec) { s.Network, s.Proxy = "", nil })},
		renderCase{name: "hand working folder in home", spec: hand(func(s *sandbox.Spec) { s.Dir = d + "/homes/p/work" })},
		renderCase{name: "hand no working folder", spec: hand(func(s *sandbox.Spec) { s.Dir = "" })},
		renderCase{name: "hand trustd", spec: hand(func(s *sandbox.Spec) { s.TrustD = true })},
		renderCase{name: "hand exec terminal", opts: Options{Terminal: "/dev/ttys042", DeveloperDir: clt}, spec: hand(func(s *sandbox.Spec) { s.Kind = "exec" })},
		renderCase{name: "hand server ignores terminal", opts: Options{Terminal: "/dev/ttys042"}, spec: hand(nil)},
		renderCase{name: "hand developer dir is a system path", opts: Options{DeveloperDir: "/usr/lib"}, spec: hand(nil)},
		renderCase{name: "hand more mounts", spec: hand(func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts,
				sandbox.Mount{Source: d + "/homes/p-cache", Dest: d + "/homes/p-cache", Writable: true},
				sandbox.Mount{Source: "/Users/u/scratch", Writable: true},
				sandbox.Mount{Source: "/opt/homebrew/opt/python@3.12"},
				sandbox.Mount{Source: "/opt/homebrew/opt/python@3.12"}, // a repeat is named once
				sandbox.Mount{Source: d + "/runtimes/node-22"},
			)
		})},
		renderCase{name: "hand denies sorted and repeated", spec: hand(func(s *sandbox.Spec) {
			s.Deny = append(s.Deny, d+"/plugins/z", d+"/plugins/a", d+"/plugins/z", "/Users/u/elsewhere", "/tmp/oz0-other")
		})},
		renderCase{name: "hand tmp spellings", spec: func(*testing.T) *sandbox.Spec {
			s := handSpec("/tmp//oz0/", "/tmp/oz0/plugins/p/c/", "/var/folders/x/T/homes/p", "", "/tmp/oz0/homes/q")
			s.Env = []string{"HOME=/var/folders/x/T/homes/p", "SCRIPT=/tmp/oz0/plugins/p/c/s.py", "DATA=/tmp/oz0/x", "OTHER=/tmp/oz0plus"}
			s.Argv = []string{"/tmp/oz0/plugins/p/c/bin/tool", "/tmp/oz0/plugins/p/c", "/var/folders/x/T/homes/p/f", "/tmp/other"}
			return s
		}},
		renderCase{name: "hand linked library", links: map[string]string{"/Users/u": "/Volumes/Data/u"}, spec: hand(nil)},
		renderCase{name: "hand home is a link", links: map[string]string{d + "/homes/p": "/Users/u/.ssh"}, spec: hand(nil)},
		renderCase{name: "hand writable mount is a link", links: map[string]string{"/Users/u/scratch": "/Users/u/.ssh"}, spec: hand(func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/Users/u/scratch", Writable: true})
		})},
		renderCase{name: "refuse nil spec", spec: func(*testing.T) *sandbox.Spec { return nil }},
		renderCase{name: "refuse bad terminal", opts: Options{Terminal: "/dev/tty"}, spec: hand(nil)},
		renderCase{name: "refuse bad port", spec: hand(func(s *sandbox.Spec) { s.Proxy.Port = 70000 })},
		renderCase{name: "refuse bad developer dir", opts: Options{DeveloperDir: "relative"}, spec: hand(nil)},
		renderCase{name: "refuse bad data dir", spec: hand(func(s *sandbox.Spec) { s.DataDir = "oz0" })},
		renderCase{name: "refuse bad home", spec: hand(func(s *sandbox.Spec) { s.Home = d + "/homes/../p" })},
		renderCase{name: "refuse bad working folder", spec: hand(func(s *sandbox.Spec) { s.Dir = "/a/./b" })},
		renderCase{name: "refuse bad mount", spec: hand(func(s *sandbox.Spec) { s.Mounts = append(s.Mounts, sandbox.Mount{Source: "rel"}) })},
		renderCase{name: "refuse moved mount", spec: hand(func(s *sandbox.Spec) { s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/opt/x", Dest: "/y"}) })},
		renderCase{name: "refuse read-only home", spec: hand(func(s *sandbox.Spec) { s.Mounts = append(s.Mounts, sandbox.Mount{Source: d + "/homes/p"}) })},
		renderCase{name: "refuse writable plugin folder", spec: hand(func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: d + "/plugins/p/c", Writable: true})
		})},
		renderCase{name: "refuse overlap", spec: hand(func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: d + "/homes/p/ro"})
		})},
		renderCase{name: "refuse writable system path", spec: hand(func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Source: "/usr/local/lib/x", Writable: true})
		})},
		renderCase{name: "refuse bad deny", spec: hand(func(s *sandbox.Spec) { s.Deny = append(s.Deny, "x") })},
		renderCase{name: "refuse deny in system path", spec: hand(func(s *sandbox.Spec) { s.Deny = append(s.Deny, "/usr/share/x") })},
		renderCase{name: "refuse home holding the data folder", spec: hand(func(s *sandbox.Spec) {
			s.Home, s.Mounts[1].Source, s.Mounts[1].Dest = "/Users/u", "/Users/u", "/Users/u"
		})},
		renderCase{name: "refuse deny over an allowed path", spec: hand(func(s *sandbox.Spec) { s.Deny = append(s.Deny, d+"/plugins") })},
		renderCase{name: "refuse over 64 KiB", spec: hand(func(s *sandbox.Spec) {
			for i := range 400 {
				s.Deny = append(s.Deny, fmt.Sprintf("%s/homes/q%d/%s", d, i, strings.Repeat("x", 200)))
			}
		})},
		renderCase{name: "refuse odd plugin name", spec: hand(func(s *sandbox.Spec) { s.Plugin = "P Q" })},
	)
	return cases
}

// describe is everything the renderer gives for one case, as text.
func (c renderCase) describe(t *testing.T) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s\n", c.name)
	s := c.spec(t)
	if s == nil && !strings.HasPrefix(c.name, "refuse nil") {
		b.WriteString("no spec\n")
		return b.String()
	}
	p, err := RenderProfileWith(s, c.opts)
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
		return b.String()
	}
	show, err := ShowWith(s, c.opts)
	if err != nil {
		t.Fatalf("%s: render succeeded, show failed: %v", c.name, err)
	}
	b.WriteString(show)
	fmt.Fprintf(&b, "--- pending port %v, rewrite %q\n", p.pendingPort, p.rewrite)
	if argv, err := Argv(s, c.opts); err != nil {
		fmt.Fprintf(&b, "--- argv error: %v\n", err)
	} else {
		fmt.Fprintf(&b, "--- argv after the profile: %q\n", argv[2+2*len(p.Params)+1:])
	}
	env, err := Env(s, c.opts)
	if err != nil {
		t.Fatalf("%s: render succeeded, env failed: %v", c.name, err)
	}
	fmt.Fprintf(&b, "--- env %q\n", env)
	return b.String()
}

// Every case renders (or is refused) exactly as pinned.
func TestRenderCasesGolden(t *testing.T) {
	var all strings.Builder
	for _, c := range renderCases() {
		func() {
			if c.links != nil {
				old := resolve
				defer func() { resolve = old }()
				resolve = func(p string) (string, error) {
					return (&checked{links: c.links}).resolve(p, true), nil
				}
			}
			all.WriteString(c.describe(t))
		}()
	}
	golden.Check(t, "render-cases.golden", all.String())
}
