package backenddarwin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/internal/golden"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// clt is the developer folder most Macs without Xcode have (xcode-select -p).
const clt = "/Library/Developer/CommandLineTools"

// goldenCases are the fixture plugins whose profiles are pinned, plus variants
// that change the profile's shape.
var goldenCases = []struct {
	name, fixture string
	edit          func(*sandbox.Host)
	spec          func(*sandbox.Spec)
	opts          Options
}{
	{name: "demo", fixture: "demo", opts: Options{DeveloperDir: clt}},
	{name: "egress-demo", fixture: "egress-demo", opts: Options{DeveloperDir: clt}},
	{name: "crashy", fixture: "crashy", opts: Options{DeveloperDir: clt}},
	{name: "claude-hooks", fixture: "claude-hooks", opts: Options{DeveloperDir: clt}},
	{name: "demo-trustd", fixture: "demo", edit: func(h *sandbox.Host) { h.TrustD = true }, opts: Options{DeveloperDir: clt}},
	{name: "demo-no-proxy", fixture: "demo", edit: func(h *sandbox.Host) { h.ProxyPort = 0 }},
	{name: "demo-xcode", fixture: "demo", opts: Options{DeveloperDir: "/Applications/Xcode.app/Contents/Developer"}},
	{name: "demo-exec-terminal", fixture: "demo", spec: func(s *sandbox.Spec) { s.Kind = "exec" }, opts: Options{DeveloperDir: clt, Terminal: "/dev/ttys003"}},
	{name: "demo-tmp-data", fixture: "demo", edit: func(h *sandbox.Host) {
		h.DataDir, h.KeyFile = "/tmp/oz0", "/tmp/oz0/node.key"
		h.PluginDir, h.Home = "/tmp/oz0/plugins/demo/0123456789abcdef0123456789abcdef01234567", "/var/folders/xy/T/oz0-home/demo"
		h.Others = []string{"/tmp/oz0/homes/other", "/etc/oz0-other"}
		h.Runtimes = nil
	}, opts: Options{DeveloperDir: clt}},
}

func TestProfileGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			s := fixtureSpec(t, c.fixture, c.edit)
			if c.spec != nil {
				c.spec(s)
			}
			out, err := ShowWith(s, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, c.name+".sb", out)
			p, err := RenderProfileWith(s, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkProfileWith(p, s, c.opts); err != nil {
				t.Errorf("profile fails the checks:\n%v\n%s", err, p.Text)
			}
		})
	}
}

// Every valid fixture either gets a profile passing every check or is refused by
// the policy before any profile is rendered (sandbox: host / own).
func TestProfileEveryFixture(t *testing.T) {
	refused := map[string]bool{"host-health": true, "own-sandbox": true}
	for _, name := range fixtures.Valid() {
		t.Run(name, func(t *testing.T) {
			if refused[name] {
				s, err := fixtureSpecErr(t, name)
				if err == nil {
					t.Fatalf("fixture %s should be refused, got a spec for %v", name, s.Argv)
				}
				return
			}
			s, err := fixtureSpecErr(t, name)
			if errors.Is(err, errNoTarget) {
				t.Skipf("%v: not rendered", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := RenderProfile(s)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkProfile(p, s); err != nil {
				t.Errorf("%v\n%s", err, p.Text)
			}
			// As a Mac runs it: the plugin's code is its writable view, at the
			// view's own path (Seatbelt has no mount namespace); it runs from there.
			v, err := fixtureSpecWith(t, name, func(h *sandbox.Host) {
				h.PluginView = filepath.Join(goldenData, "views", name, "0123456789abcdef0123456789abcdef01234567")
				h.PathsAreViews = true
			})
			if err != nil {
				t.Fatal(err)
			}
			view := false
			for _, m := range v.Mounts {
				view = view || m.Writable && m.Source == v.PluginDir && strings.Contains(m.Source, "/views/")
			}
			if !view {
				t.Fatalf("the spec binds no writable view: plugin folder %s, mounts %+v", v.PluginDir, v.Mounts)
			}
			pv, err := RenderProfile(v)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkProfile(pv, v); err != nil {
				t.Errorf("with its view: %v\n%s", err, pv.Text)
			}
		})
	}
}

func TestProfileDeterministic(t *testing.T) {
	s := fixtureSpec(t, "egress-demo", nil)
	a, err := RenderProfile(s)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		b, err := RenderProfile(s)
		if err != nil {
			t.Fatal(err)
		}
		if a.Text != b.Text || len(a.Params) != len(b.Params) {
			t.Fatal("two renders of one spec differ")
		}
		for i := range a.Params {
			if a.Params[i] != b.Params[i] {
				t.Fatalf("parameter %d differs: %v vs %v", i, a.Params[i], b.Params[i])
			}
		}
	}
}

// trustd is the operator's grant, never the tool's doing: a Go binary as argv[0]
// (the old trigger) gets nothing by itself.
func TestTrustDOnlyWhenGranted(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	s.Argv = []string{"/usr/local/bin/oz0-node"}
	without, _ := RenderProfile(s)
	s = fixtureSpec(t, "demo", func(h *sandbox.Host) { h.TrustD = true })
	with, _ := RenderProfile(s)
	if strings.Contains(without.Text, TrustDService) {
		t.Error("trustd is reachable without being asked for")
	}
	if !strings.Contains(with.Text, `(global-name "`+TrustDService+`")`) {
		t.Error("trustd missing when asked for")
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp":                    "/private/tmp",
		"/tmp/x":                  "/private/tmp/x",
		"/var/folders/ab/T/":      "/private/var/folders/ab/T",
		"/etc//ssl":               "/private/etc/ssl",
		"/tmpfoo/x":               "/tmpfoo/x",
		"/Users/me//Library/":     "/Users/me/Library",
		"/private/tmp/x":          "/private/tmp/x",
		`/Users/a "q" (p) \b/é`:   `/Users/a "q" (p) \b/é`,
		"/Users/me/Application S": "/Users/me/Application S",
	} {
		got, err := Canonical(in)
		if err != nil || got != want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "rel/x", "/a/../b", "/a/./b", "/a\nb", "/a\x00b", "/\xff", "/", "//", "/" + strings.Repeat("n", 256), strings.Repeat("/abcdefgh", 128)} {
		if got, err := Canonical(in); !errors.Is(err, ErrUnrepresentable) {
			t.Errorf("Canonical(%q) = %q, %v; want an ErrUnrepresentable error", in, got, err)
		}
	}
}

// handSpec is a minimal Seatbelt Spec built by hand (tests that need odd paths).
func handSpec(data, pdir, home, runtime, other string) *sandbox.Spec {
	s := &sandbox.Spec{
		Plugin: "fuzz", Kind: "server", Backend: policy.BackendSeatbelt,
		Argv: []string{"/usr/bin/python3", "server.py"}, Dir: pdir,
		Network: policy.NetProxy, Proxy: &sandbox.Proxy{Port: 40001},
		DataDir: data, PluginDir: pdir, Home: home,
		Mounts: []sandbox.Mount{{Source: pdir, Dest: pdir}, {Source: home, Dest: home, Writable: true}},
		Deny:   []string{data, data + "/node.key", other},
	}
	if runtime != "" {
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: runtime, Dest: runtime})
	}
	return s
}

func TestProfileRefuses(t *testing.T) {
	const d = "/Users/u/oz0"
	cases := map[string]*sandbox.Spec{
		"home holds the data folder":   handSpec(d, d+"/plugins/p/c", "/Users/u", "", d+"/homes/q"),
		"plugin folder is the data":    handSpec(d, d, d+"/homes/p", "", d+"/homes/q"),
		"deny covers the plugin":       handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/plugins"),
		"runtime is above the data":    handSpec(d, d+"/plugins/p/c", d+"/homes/p", "/Users", d+"/homes/q"),
		"dot-dot in the plugin folder": handSpec(d, d+"/plugins/p/../q", d+"/homes/p", "", d+"/homes/q"),
		"newline in the home":          handSpec(d, d+"/plugins/p/c", d+"/homes/p\n(allow default)", "", d+"/homes/q"),
		"relative data folder":         handSpec("oz0", "/x/p", "/x/h", "", "/x/q"),
	}
	s := handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/homes/q")
	s.Network = policy.NetHostProxyVars
	cases["host network"] = s
	s = handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/homes/q")
	s.Plugin = `x") (allow default`
	cases["odd plugin name"] = s
	s = handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/homes/q")
	s.Dir = "/Users"
	cases["working folder outside"] = s
	s = handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/homes/q")
	s.Mounts = append(s.Mounts, sandbox.Mount{Source: d + "/run/egress/p", Dest: sandbox.InnerProxyDir})
	cases["linux mount"] = s
	s = handSpec(d, d+"/plugins/p/c", d+"/homes/p", "", d+"/homes/q")
	for i := range 400 {
		s.Deny = append(s.Deny, d+"/homes/q"+strings.Repeat("x", 150)+string(rune('a'+i%26))+strings.Repeat("y", i))
	}
	cases["over 64 KiB"] = s
	cases["data folder in a system path"] = handSpec("/usr/local/lib/oz0", "/usr/local/lib/oz0/plugins/p/c", "/usr/local/lib/oz0/homes/p", "", "/usr/local/lib/oz0/homes/q")
	cases["home in a system path"] = handSpec(d, d+"/plugins/p/c", "/opt/homebrew/share/oz0-home/p", "", d+"/homes/q")
	cases["plugin folder inside the home"] = handSpec(d, d+"/homes/p/src", d+"/homes/p", "", d+"/homes/q")
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := RenderProfile(s)
			if !errors.Is(err, ErrUnrepresentable) {
				t.Fatalf("got %v (profile %d bytes), want an ErrUnrepresentable error", err, len(p.Text))
			}
		})
	}
}

func FuzzRenderProfile(f *testing.F) {
	const d = "/Users/u/Library/Application Support/oz0-node"
	f.Add(d, "plugins/p/c", "homes/p", "/opt/homebrew/opt/node", "homes/q")
	f.Add("/tmp/oz0", "plugins/p/c", "homes/p", "/var/rt", "plugins/q")
	f.Add(`/Users/a "quoted" (paren) \back`, `plugins/p/"); (allow default) ("`, "homes/p\nx", "", "homes/q")
	f.Add("/Users/é/データ", "plugins/π/c", "homes/π", "/usr/local/lib/node", "homes/ω")
	f.Add("/Users/u/oz0", "plugins/../../etc", "homes/./p", "", "..")
	f.Add("/Users/u/"+strings.Repeat("L", 300), "plugins/"+strings.Repeat("n", 250), "homes/p", "", "homes/q")
	f.Add("//var//folders/", "plugins//p/", "homes/p/", "/etc/x", "")
	f.Add("/Users/u/oz0", "/Users/u/src/plugin", "/usr/local/home", "/opt/homebrew", "/Users/u")
	f.Fuzz(func(t *testing.T, data, plugin, home, runtime, other string) {
		// Names are placed under the data folder, as the node does, unless the
		// fuzzer makes them absolute.
		under := func(p string) string {
			if strings.HasPrefix(p, "/") {
				return p
			}
			return data + "/" + p
		}
		s := handSpec(data, under(plugin), under(home), runtime, under(other))
		p, err := RenderProfile(s)
		if err != nil {
			if !errors.Is(err, ErrUnrepresentable) {
				t.Fatalf("error without ErrUnrepresentable: %v", err)
			}
			return
		}
		if _, err := checkProfile(p, s); err != nil {
			t.Fatalf("rendered profile fails the checks: %v\n%s\n%q", err, p.Text, p.Params)
		}
	})
}

func TestArgv(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	argv, err := Argv(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := RenderProfile(s)
	want := []string{SandboxExec, "-p", p.Text}
	for _, prm := range p.Params {
		want = append(want, "-D", prm.Name+"="+prm.Value)
	}
	want = append(append(want, "--"), s.Argv...)
	if strings.Join(argv, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("argv\n%q\nwant\n%q", argv, want)
	}
	s.Argv = nil
	if _, err := Argv(s, Options{}); err == nil {
		t.Error("empty command accepted")
	}
}

// sandbox show prints the profile the runner runs: the same text, the same host
// facts; without a port yet it shows the proxy rule with PORT and says why,
// and such a preview is never run.
func TestPreviewIsWhatRuns(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	s.Kind = "exec"
	argv, err := Argv(s, HostOptions(s))
	if err != nil {
		t.Fatal(err)
	}
	show, err := Preview(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(show, argv[2]) {
		t.Errorf("the preview's profile is not the one the runner passes with -p:\n%s\n---\n%s", show, argv[2])
	}
	for i := 3; i+1 < len(argv) && argv[i] == "-D"; i += 2 {
		name, value, _ := strings.Cut(argv[i+1], "=")
		if !strings.Contains(show, ";   "+name+"="+strconv.Quote(value)+"\n") {
			t.Errorf("the preview lacks the runner's parameter %s", argv[i+1])
		}
	}

	pending := fixtureSpec(t, "demo", func(h *sandbox.Host) { h.ProxyPort = 0 })
	if pending.Network != policy.NetProxy || pending.Proxy != nil {
		t.Fatalf("fixture: want a proxy network without a port, got %s %+v", pending.Network, pending.Proxy)
	}
	show, err = Preview(pending)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`(allow network-outbound (remote ip "localhost:PORT"))`, "assigned when the node starts"} {
		if !strings.Contains(show, want) {
			t.Errorf("preview without a port lacks %q:\n%s", want, show)
		}
	}
	if strings.Contains(show, "Network: none") {
		t.Error("preview without a port says the sandbox has no network")
	}
	if _, err := Argv(pending, Options{Preview: true}); err == nil {
		t.Error("a preview profile was accepted for running")
	}
	if p, _ := RenderProfile(pending); strings.Contains(p.Text, "localhost:PORT") || strings.Contains(p.Text, "(remote ip") {
		t.Error("a profile to run carries a network rule without a port")
	}
}

// A Seatbelt tool finds Homebrew's programs before /usr/bin's shims.
func TestToolPathPrefersHomebrew(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	if !slices.Contains(s.Env, "PATH="+sandbox.DarwinPath) || !strings.HasPrefix(sandbox.DarwinPath, "/opt/homebrew/bin:") {
		t.Errorf("env %q: want PATH=%s with Homebrew first", s.Env, sandbox.DarwinPath)
	}
}

// TMPDIR is made in the home without following a link the plugin left there.
func TestTMPDIRNeverFollowsALink(t *testing.T) {
	s := fixtureSpec(t, "demo", nil)
	tmp := t.TempDir()
	home := filepath.Join(tmp, "homes", "demo")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, kv := range s.Env {
		if strings.HasPrefix(kv, "TMPDIR=") {
			s.Env[i] = "TMPDIR=" + filepath.Join(home, "tmp")
		}
	}
	s.Home = home
	if err := ensureTMPDIR(s); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(home, "tmp")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("TMPDIR not made a 0700 folder: %v %v", fi, err)
	}
	os.Remove(filepath.Join(home, "tmp"))
	dangling := filepath.Join(tmp, "LaunchAgents", "evil")
	if err := os.Symlink(dangling, filepath.Join(home, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := ensureTMPDIR(s); err == nil {
		t.Error("a TMPDIR that is a link was accepted")
	}
	if _, err := os.Lstat(dangling); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
	os.Remove(filepath.Join(home, "tmp"))
	if err := os.Symlink(tmp, filepath.Join(home, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := ensureTMPDIR(s); err == nil {
		t.Error("a TMPDIR linked to an existing folder was accepted")
	}
}
