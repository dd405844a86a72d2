package manifest

import (
	"os"
	"path/filepath"
	"testing"

	"oz0.ai/node/fixtures"
)

// FuzzLoad writes fuzzed bytes as the manifest, the server file and the hooks file
// of a plugin folder and loads it: Load must never panic, and must return either a
// manifest or an Errors whose every entry names its file.
func FuzzLoad(f *testing.F) {
	seed := func(name string) {
		dir, err := fixtures.Extract(name, f.TempDir())
		if err != nil {
			f.Fatal(err)
		}
		read := func(ps ...string) []byte {
			for _, p := range ps {
				if b, err := os.ReadFile(filepath.Join(dir, p)); err == nil {
					return b
				}
			}
			return nil
		}
		f.Add(read("plugin.json", ".claude-plugin/plugin.json"), read(".mcp.json", "mcp.json"), read("hooks/hooks.json"), uint8(0))
	}
	for _, n := range append(append(fixtures.Valid(), fixtures.Invalid()...), fixtures.Corpus()...) {
		seed(n)
	}
	f.Add([]byte(`{"name":"a","hooks":"h.json","mcpServers":"s.json"}`), []byte(`{"${":{}}`), []byte(`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"${PLUGIN_ROOT}/../x","timeout":1e400}]}]}}`), uint8(1))
	f.Fuzz(func(t *testing.T, manifest, servers, hooks []byte, layout uint8) {
		dir := t.TempDir()
		mf := "plugin.json"
		if layout%2 == 1 {
			mf = ".claude-plugin/plugin.json"
		}
		sf := ".mcp.json"
		if layout&2 != 0 {
			sf = "mcp.json"
		}
		write := func(p string, b []byte) {
			if b == nil {
				return
			}
			full := filepath.Join(dir, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(mf, manifest)
		write(sf, servers)
		write("hooks/hooks.json", hooks)
		// A path named by the manifest may point at these too.
		write("h.json", hooks)
		write("s.json", servers)
		m, err := Load(dir, Options{FirstParty: layout&4 != 0})
		if err != nil {
			if m != nil {
				t.Fatalf("both a manifest and an error: %v", err)
			}
			es, ok := AsErrors(err)
			if !ok || len(es) == 0 {
				t.Fatalf("error %v is not a non-empty Errors", err)
			}
			for _, e := range es {
				if e.File == "" || e.Msg == "" {
					t.Fatalf("error entry without a file or message: %+v", e)
				}
			}
			return
		}
		if m == nil || m.Name == "" || m.File == "" {
			t.Fatalf("manifest %+v without name or file", m)
		}
		seen := map[string]bool{}
		for _, s := range m.Servers {
			if s.Sandbox != SandboxDefault && s.Sandbox != SandboxHost && s.Sandbox != SandboxOwn {
				t.Fatalf("server %s: sandbox kind %q", s.Name, s.Sandbox)
			}
			// The name the node uses in files and routing is always a safe one.
			if !serverRE.MatchString(s.Name) || seen[s.Name] {
				t.Fatalf("server name %q (as written %q) is not a valid, unique name", s.Name, s.Label)
			}
			seen[s.Name] = true
			if s.Remote != nil && (s.Command != "" || s.Args != nil || s.Env != nil || s.Cwd != "") {
				t.Fatalf("remote server %s carries a command: %+v", s.Name, s)
			}
		}
		for _, h := range m.Hooks {
			if h.Timeout <= 0 || h.Timeout > MaxHookTimeout {
				t.Fatalf("hook timeout %v", h.Timeout)
			}
			if h.If != "" {
				if _, err := ParseRule(h.If); err != nil {
					t.Fatalf("a hook with an unreadable if %q loaded", h.If)
				}
			}
		}
		if _, err := Patterns(m.Egress); err != nil {
			t.Fatalf("a loaded egress list does not parse again: %v", err)
		}
		m.Expand(Vars{Root: "/r", Data: "/d"})
		m.ExpandAll(Vars{Root: "/r", Data: "/d"}, func(n string) (string, bool) { return n, len(n)%2 == 0 })
		Warnings(m)
	})
}

// FuzzExpand: Expand never panics, fills every well-formed reference when every
// name has a value, and reports as missing only names that have none.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "${A}", "x${A:-d}y", "${user_config.k}", "${", "${A B}", "$${A}}", "${A:-${B}}", "${:-x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, missing := Expand(s, func(n string) (string, bool) { return "v", true })
		if len(missing) != 0 {
			t.Fatalf("missing %v although every name has a value", missing)
		}
		// When every reference is well formed, each is replaced, and nothing else is.
		if _, err := Refs(s); err == nil && out != refRE.ReplaceAllString(s, "v") {
			t.Fatalf("Expand(%q) = %q", s, out)
		}
		_, missing = Expand(s, nil)
		for _, n := range missing {
			if checkRefName(n) != nil {
				t.Fatalf("missing name %q is not a reference name", n)
			}
		}
	})
}

// FuzzRule: parsing and matching any rule against any call never panics.
func FuzzRule(f *testing.F) {
	for _, s := range []string{"Bash(git commit:*)", "Edit(/src/**/*.ts)", "WebFetch(domain:x.com)", "mcp__a", "Read(//**)", "Bash(*)"} {
		f.Add(s, "Bash", "git commit -m x && ls")
	}
	f.Fuzz(func(t *testing.T, rule, tool, arg string) {
		r, err := ParseRule(rule)
		if err != nil {
			return
		}
		in := map[string]any{"command": arg, "file_path": arg, "url": arg, "subagent_type": arg}
		r.Matches(tool, in)
		r.Matches(r.Tool, in)
		r.Matches(r.Tool, nil)
		h := Hook{Event: "PreToolUse", If: rule, Matcher: arg}
		h.Applies(tool, in)
	})
}
