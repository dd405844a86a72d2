package manifest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
)

// extract writes a fixture plugin into a fresh temp folder.
func extract(t *testing.T, name string) string {
	t.Helper()
	dir, err := fixtures.Extract(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// writePlugin writes files (path → content) into a fresh temp folder.
func writePlugin(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustLoad(t *testing.T, dir string) *Manifest {
	t.Helper()
	m, err := Load(dir, Options{})
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return m
}

// loadErr loads dir, requires an Errors and returns its text.
func loadErr(t *testing.T, dir string) string {
	t.Helper()
	m, err := Load(dir, Options{})
	if err == nil {
		t.Fatalf("Load(%s) succeeded (%+v); want an error", dir, m)
	}
	es, ok := AsErrors(err)
	if !ok {
		t.Fatalf("Load(%s): error %v is not an Errors", dir, err)
	}
	for _, e := range es {
		if e.File == "" {
			t.Errorf("error without a file: %v", e)
		}
	}
	return err.Error()
}

func TestEveryValidFixtureLoads(t *testing.T) {
	if len(fixtures.Valid()) < 5 {
		t.Fatalf("only %d valid fixtures: %v", len(fixtures.Valid()), fixtures.Valid())
	}
	for _, name := range fixtures.Valid() {
		t.Run(name, func(t *testing.T) {
			m := mustLoad(t, extract(t, name))
			if m.Name != name {
				t.Errorf("name %q, want the folder name %q", m.Name, name)
			}
			for _, s := range m.Servers {
				switch {
				case s.Remote != nil && (s.Remote.URL == "" || s.Command != ""):
					t.Errorf("remote server %s: url %q, command %q", s.Name, s.Remote.URL, s.Command)
				case s.Remote == nil && (s.Command == "" || s.Sandbox == ""):
					t.Errorf("server %+v: empty command or sandbox kind", s)
				}
			}
		})
	}
}

func TestEveryInvalidFixtureFailsNamingFileAndField(t *testing.T) {
	if len(fixtures.Invalid()) < 15 {
		t.Fatalf("only %d invalid fixtures", len(fixtures.Invalid()))
	}
	for _, name := range fixtures.Invalid() {
		t.Run(name, func(t *testing.T) {
			want := fixtures.Expect(name)
			if want == "" {
				t.Fatalf("invalid fixture %s has no expect file", name)
			}
			if !strings.Contains(want, ": ") {
				t.Fatalf("expect %q does not name a file and a message", want)
			}
			got := loadErr(t, extract(t, name))
			if !strings.Contains(got, want) {
				t.Errorf("error\n  %s\ndoes not contain\n  %s", got, want)
			}
		})
	}
}

func TestBothMCPJSONShapesLoad(t *testing.T) {
	for shape, content := range map[string]string{
		"wrapped": `{"mcpServers":{"db":{"command":"python3","args":["${PLUGIN_ROOT}/s.py"],"env":{"A":"1"},"cwd":"sub"}}}`,
		"bare":    `{"db":{"command":"python3","args":["${PLUGIN_ROOT}/s.py"],"env":{"A":"1"},"cwd":"sub"}}`,
	} {
		for _, file := range []string{"mcp.json", ".mcp.json"} {
			t.Run(shape+"/"+file, func(t *testing.T) {
				m := mustLoad(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"shapes"}`, file: content}))
				if m.ServersFile != file {
					t.Errorf("ServersFile %q, want %q", m.ServersFile, file)
				}
				s := m.Server("db")
				if s == nil {
					t.Fatalf("no server db in %+v", m.Servers)
				}
				if s.Command != "python3" || len(s.Args) != 1 || s.Args[0] != "${PLUGIN_ROOT}/s.py" || s.Env["A"] != "1" || s.Cwd != "sub" {
					t.Errorf("server %+v", s)
				}
				if s.Sandbox != SandboxDefault {
					t.Errorf("sandbox %q, want default", s.Sandbox)
				}
			})
		}
	}
}

func TestInlineAndPathMCPServersInManifest(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"inline","mcpServers":{"a":{"command":"x"}}}`,
	}))
	if m.ServersFile != "plugin.json" || m.Server("a") == nil {
		t.Errorf("inline servers: file %q servers %+v", m.ServersFile, m.Servers)
	}
	m = mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json":       `{"name":"by-path","mcpServers":"conf/servers.json"}`,
		"conf/servers.json": `{"b":{"command":"y"}}`,
	}))
	if m.ServersFile != "conf/servers.json" || m.Server("b") == nil {
		t.Errorf("servers by path: file %q servers %+v", m.ServersFile, m.Servers)
	}
	got := loadErr(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"by-path","mcpServers":"../servers.json"}`,
	}))
	if !strings.Contains(got, `plugin.json: mcpServers: "../servers.json": must be a path inside the plugin folder`) {
		t.Errorf("got %s", got)
	}
}

func TestServerFieldPathsFollowTheFileShape(t *testing.T) {
	for shape, tc := range map[string]struct{ file, content, want string }{
		"wrapped":  {".mcp.json", `{"mcpServers":{"db":{"command":1}}}`, ".mcp.json: mcpServers.db.command: must be a string"},
		"bare":     {".mcp.json", `{"db":{"command":1}}`, ".mcp.json: db.command: must be a string"},
		"inline":   {"plugin.json", "", "plugin.json: mcpServers.db.command: must be a string"},
		"by path":  {"conf/s.json", `{"db":{"command":1}}`, "conf/s.json: db.command: must be a string"},
		"dup bare": {".mcp.json", `{"db":{"command":"a"},"db":{"command":"b"}}`, ".mcp.json: db: duplicate key"},
	} {
		t.Run(shape, func(t *testing.T) {
			files := map[string]string{"plugin.json": `{"name":"shapes"}`}
			switch shape {
			case "inline":
				files["plugin.json"] = `{"name":"shapes","mcpServers":{"db":{"command":1}}}`
			case "by path":
				files["plugin.json"] = `{"name":"shapes","mcpServers":"conf/s.json"}`
				files[tc.file] = tc.content
			default:
				files[tc.file] = tc.content
			}
			if got := loadErr(t, writePlugin(t, files)); !strings.Contains(got, tc.want) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBothMCPFilesRefused(t *testing.T) {
	got := loadErr(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"two"}`,
		"mcp.json":    `{"a":{"command":"x"}}`,
		".mcp.json":   `{"b":{"command":"y"}}`,
	}))
	if !strings.Contains(got, ".mcp.json: both mcp.json and .mcp.json exist") {
		t.Errorf("got %s", got)
	}
}

func TestClaudeCodeLayoutWithHooks(t *testing.T) {
	m := mustLoad(t, extract(t, "claude-hooks"))
	if m.Layout != "claude-code" || m.File != ".claude-plugin/plugin.json" {
		t.Errorf("layout %q file %q", m.Layout, m.File)
	}
	if m.Author != "oz0 fixtures <fixtures@example.com>" || m.Version != "0.3.0" {
		t.Errorf("author %q version %q", m.Author, m.Version)
	}
	if m.HooksFile != "hooks/hooks.json" || len(m.Hooks) != 2 {
		t.Fatalf("hooks file %q hooks %+v", m.HooksFile, m.Hooks)
	}
	pre, start := m.Hooks[0], m.Hooks[1]
	if pre.Event != "PreToolUse" || pre.Matcher != "echo" || pre.Timeout != 10*time.Second || pre.Command != "${CLAUDE_PLUGIN_ROOT}/hooks/guard.sh" {
		t.Errorf("PreToolUse hook %+v", pre)
	}
	if start.Event != "SessionStart" || start.Matcher != "" || start.Timeout != DefaultHookTimeout {
		t.Errorf("SessionStart hook %+v", start)
	}
}

func TestBothManifestsClaudeCodeOneWinsWithAWarning(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json":                `{"name":"a","mcpServers":{"s":{"command":"x"}}}`,
		".claude-plugin/plugin.json": `{"name":"b"}`,
	}))
	if m.Name != "b" || m.File != ".claude-plugin/plugin.json" || m.Layout != "claude-code" || len(m.Servers) != 0 {
		t.Errorf("manifest %+v", m)
	}
	d, ok := findDiag(Warnings(m), "")
	if !ok || d.File != "plugin.json" || !strings.Contains(d.Message, "plugin.json is ignored") {
		t.Errorf("warnings %v", Warnings(m))
	}
	// A plugin.json that cannot be read does not matter once it is ignored.
	dir := writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"b"}`})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "plugin.json")); err != nil {
		t.Fatal(err)
	}
	if m := mustLoad(t, dir); m.Name != "b" {
		t.Errorf("name %q", m.Name)
	}
}

func TestHooksParsing(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"hooky","hooks":{"PostToolUse":[{"matcher":"Write|Edit","hooks":[
			{"type":"command","command":"${PLUGIN_ROOT}/a.sh","timeout":5},
			{"type":"command","command":"b","timeout":3600}]}],
			"SessionEnd":[{"hooks":[{"type":"command","command":"c"}]}]}}`,
	}))
	if m.HooksFile != "plugin.json" || len(m.Hooks) != 3 {
		t.Fatalf("hooks %+v from %q", m.Hooks, m.HooksFile)
	}
	want := []Hook{
		{Event: "PostToolUse", Matcher: "Write|Edit", Command: "${PLUGIN_ROOT}/a.sh", Timeout: 5 * time.Second, DeclaredTimeout: 5},
		{Event: "PostToolUse", Matcher: "Write|Edit", Command: "b", Timeout: MaxHookTimeout, DeclaredTimeout: 3600},
		{Event: "SessionEnd", Command: "c", Timeout: DefaultHookTimeout},
	}
	for i := range want {
		if !reflect.DeepEqual(m.Hooks[i], want[i]) {
			t.Errorf("hook %d: %+v, want %+v", i, m.Hooks[i], want[i])
		}
	}
}

func TestHookErrorsNameTheField(t *testing.T) {
	for name, tc := range map[string]struct{ hooks, want string }{
		"timeout zero":   {`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":0}]}]}}`, "hooks/hooks.json: hooks.Stop[0].hooks[0].timeout: must be a positive number of seconds"},
		"timeout string": {`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":"5"}]}]}}`, "hooks.Stop[0].hooks[0].timeout: must be a positive number"},
		"timeout minus":  {`{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":-1}]}]}`, "hooks/hooks.json: Stop[0].hooks[0].timeout: must be a positive number"},
		"timeout inf":    {`{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":1e400}]}]}`, "hooks/hooks.json: Stop[0].hooks[0].timeout: must be a positive number"},
		"async type":     {`{"Stop":[{"hooks":[{"type":"command","command":"x","async":"yes"}]}]}`, "hooks/hooks.json: Stop[0].hooks[0].async: must be true or false"},
		"no type":        {`{"hooks":{"Stop":[{"hooks":[{"command":"x"}]}]}}`, `hooks.Stop[0].hooks[0].type: is required`},
		"no command":     {`{"hooks":{"Stop":[{"hooks":[{"type":"command"}]}]}}`, `hooks.Stop[0].hooks[0].command: is required`},
		"matcher":        {`{"hooks":{"PreToolUse":[{"matcher":5,"hooks":[]}]}}`, `hooks.PreToolUse[0].matcher: must be a string`},
		"groups":         {`{"hooks":{"Stop":{}}}`, `hooks.Stop: must be an array of matcher groups`},
		"placeholder":    {`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x"},{"type":"command","command":"${user_config.k}/x"}]}]}}`, `hooks/hooks.json: hooks.Stop[0].hooks[1].command: ${user_config.k}: the manifest declares no userConfig`},
		"bad key":        {`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x ${user_config.a-b}"}]}]}}`, `hooks/hooks.json: hooks.Stop[0].hooks[0].command: ${user_config.a-b}: a userConfig key is letters`},
		"escape":         {`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/../x"}]}]}}`, `hooks/hooks.json: hooks.Stop[0].hooks[0].command: "${CLAUDE_PLUGIN_ROOT}/../x": leaves the plugin folder`},
	} {
		t.Run(name, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"hooky"}`, "hooks/hooks.json": tc.hooks}))
			if !strings.Contains(got, tc.want) {
				t.Errorf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func TestExpandReplacesPlaceholdersAsText(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"expand"}`,
		".mcp.json": `{"s":{"command":"${PLUGIN_ROOT}/bin/run","args":["--data=${PLUGIN_DATA}/x","${CLAUDE_PLUGIN_ROOT}","$HOME;${CLAUDE_PLUGIN_DATA}","${HOME}/c"],
			"env":{"D":"${PLUGIN_DATA}","R":"'${PLUGIN_ROOT}'"},"cwd":"${PLUGIN_ROOT}/sub"}}`,
		"hooks/hooks.json": `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/h.sh ${PLUGIN_DATA} ${HOME}"}]}]}}`,
	}))
	v := Vars{Root: "/r o/$(id)", Data: "/d"}
	e := m.Expand(v)
	s := e.Servers[0]
	if s.Command != "/r o/$(id)/bin/run" || s.Cwd != "/r o/$(id)/sub" {
		t.Errorf("command %q cwd %q", s.Command, s.Cwd)
	}
	wantArgs := []string{"--data=/d/x", "/r o/$(id)", "$HOME;/d", "/d/c"}
	for i, a := range wantArgs {
		if s.Args[i] != a {
			t.Errorf("args[%d] = %q, want %q", i, s.Args[i], a)
		}
	}
	if s.Env["D"] != "/d" || s.Env["R"] != "'/r o/$(id)'" {
		t.Errorf("env %v", s.Env)
	}
	if e.Hooks[0].Command != "/r o/$(id)/h.sh /d ${HOME}" {
		t.Errorf("hook command %q", e.Hooks[0].Command)
	}
	// The original keeps its placeholders: Expand returns a copy.
	if m.Servers[0].Command != "${PLUGIN_ROOT}/bin/run" || m.Servers[0].Env["D"] != "${PLUGIN_DATA}" || m.Servers[0].Args[0] != "--data=${PLUGIN_DATA}/x" || m.Hooks[0].Command != "${CLAUDE_PLUGIN_ROOT}/h.sh ${PLUGIN_DATA} ${HOME}" {
		t.Errorf("Expand changed the original: %+v %+v", m.Servers[0], m.Hooks[0])
	}
}

func TestMalformedOrUndeclaredReferenceRefused(t *testing.T) {
	for field, server := range map[string]string{
		"s.command": `{"command":"${1X}/x"}`,
		"s.args[1]": `{"command":"x","args":["ok","${user_config.missing}"]}`,
		"s.env.K":   `{"command":"x","env":{"K":"${SECRET TOKEN}"}}`,
		"s.cwd":     `{"command":"x","cwd":"${user_config.a-b}"}`,
	} {
		t.Run(field, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{
				"plugin.json": `{"name":"ph","userConfig":{"k":{"type":"string","title":"K"}}}`, ".mcp.json": `{"s":` + server + `}`}))
			if !strings.Contains(got, ".mcp.json: "+field+": ${") {
				t.Errorf("got %s", got)
			}
		})
	}
	got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"ph"}`, ".mcp.json": `{"s":{"command":"x","args":["${PLUGIN_ROOT"]}}`}))
	if !strings.Contains(got, ".mcp.json: s.args[0]: unterminated placeholder") {
		t.Errorf("got %s", got)
	}
}

func TestRelativePathsLeavingThePluginRefused(t *testing.T) {
	for _, arg := range []string{"../x.py", "./../x.py", "sub/../../x.py", "..", "${PLUGIN_ROOT}/../x", "${PLUGIN_DATA}/../../etc/passwd", "${CLAUDE_PLUGIN_DATA}/.."} {
		t.Run(arg, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"esc"}`, ".mcp.json": `{"s":{"command":"python3","args":["` + arg + `"]}}`}))
			if !strings.Contains(got, ".mcp.json: s.args[0]: \""+arg+"\": leaves the plugin folder") {
				t.Errorf("got %s", got)
			}
		})
	}
	for _, cwd := range []string{"/tmp", "../x", "${PLUGIN_ROOT}/../x"} {
		t.Run("cwd "+cwd, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"esc"}`, ".mcp.json": `{"s":{"command":"x","cwd":"` + cwd + `"}}`}))
			if !strings.Contains(got, ".mcp.json: s.cwd: ") {
				t.Errorf("got %s", got)
			}
		})
	}
	// Paths that stay inside, and absolute commands, are fine.
	mustLoad(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"esc"}`, ".mcp.json": `{"s":{"command":"/usr/bin/python3","args":["./a/../b.py","${PLUGIN_ROOT}/a/../b.py","--x=../y","${PLUGIN_DATA}/cache"],"cwd":"a/b"}}`}))
}

func TestSymlinkLeavingThePluginFolderRefused(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, ".mcp.json"), []byte(`{"s":{"command":"x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "plugin.json"), []byte(`{"name":"elsewhere"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		link, target, want string
	}{
		"mcp to /etc/passwd":      {".mcp.json", "/etc/passwd", ".mcp.json: leaves the plugin folder"},
		"mcp to sibling":          {".mcp.json", "../" + filepath.Base(outside) + "/.mcp.json", ".mcp.json: leaves the plugin folder"},
		"mcp absolute to sibling": {"mcp.json", filepath.Join(outside, ".mcp.json"), "mcp.json: leaves the plugin folder"},
		"hooks to /etc/passwd":    {"hooks/hooks.json", "/etc/passwd", "hooks/hooks.json: leaves the plugin folder"},
		"hooks folder outside":    {"hooks", outside, "hooks/hooks.json: "},
		"manifest to sibling":     {".claude-plugin/plugin.json", filepath.Join(outside, "plugin.json"), ".claude-plugin/plugin.json: leaves the plugin folder"},
	} {
		t.Run(name, func(t *testing.T) {
			// The plugin folder is a sibling of outside, so "../<outside>" leaves it.
			dir := filepath.Join(filepath.Dir(outside), "plugin-"+strings.ReplaceAll(name, " ", "-"))
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(tc.link)), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if tc.link != ".claude-plugin/plugin.json" {
				if err := os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(`{"name":"linky"}`), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if name == "hooks folder outside" {
				os.WriteFile(filepath.Join(outside, "hooks.json"), []byte(`{"hooks":{}}`), 0o644)
				os.Remove(filepath.Join(dir, "hooks"))
			}
			if err := os.Symlink(tc.target, filepath.Join(dir, tc.link)); err != nil {
				t.Fatal(err)
			}
			got := loadErr(t, dir)
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSymlinkInsideThePluginFolderFollowed(t *testing.T) {
	dir := writePlugin(t, map[string]string{"plugin.json": `{"name":"inside"}`, "conf/servers.json": `{"s":{"command":"x"}}`})
	if err := os.Symlink("conf/servers.json", filepath.Join(dir, ".mcp.json")); err != nil {
		t.Fatal(err)
	}
	if m := mustLoad(t, dir); m.Server("s") == nil {
		t.Errorf("servers %+v", m.Servers)
	}
}

// loadWithin fails the test if Load blocks (e.g. on a FIFO).
func loadWithin(t *testing.T, dir string) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		_, err := Load(dir, Options{})
		if err == nil {
			done <- ""
			return
		}
		done <- err.Error()
	}()
	select {
	case got := <-done:
		return got
	case <-time.After(5 * time.Second):
		t.Fatalf("Load(%s) blocked", dir)
	}
	return ""
}

func TestFIFOOrDeviceAsManifestFileRefusedWithoutBlocking(t *testing.T) {
	for _, file := range []string{"plugin.json", ".mcp.json", "mcp.json", "hooks/hooks.json"} {
		t.Run("fifo "+file, func(t *testing.T) {
			dir := writePlugin(t, map[string]string{"hooks/.keep": ""})
			if file != "plugin.json" {
				os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(`{"name":"fifo"}`), 0o644)
			}
			if err := syscall.Mkfifo(filepath.Join(dir, file), 0o644); err != nil {
				t.Skipf("mkfifo: %v (FIFO refusal not tested)", err)
			}
			got := loadWithin(t, dir)
			if !strings.Contains(got, file+": not a regular file") {
				t.Errorf("got %q", got)
			}
		})
	}
	t.Run("device via symlink to /dev/zero", func(t *testing.T) {
		// /dev/zero lies outside the folder: refused before it is opened.
		dir := writePlugin(t, map[string]string{"plugin.json": `{"name":"dev"}`})
		if err := os.Symlink("/dev/zero", filepath.Join(dir, ".mcp.json")); err != nil {
			t.Fatal(err)
		}
		if got := loadWithin(t, dir); !strings.Contains(got, ".mcp.json: ") {
			t.Errorf("got %q", got)
		}
	})
	t.Run("character device in the folder", func(t *testing.T) {
		dir := writePlugin(t, map[string]string{"plugin.json": `{"name":"dev"}`})
		// /dev/null's device number; needs CAP_MKNOD.
		if err := syscall.Mknod(filepath.Join(dir, ".mcp.json"), syscall.S_IFCHR|0o644, int(1<<8|3)); err != nil {
			t.Skipf("mknod: %v (device refusal not tested)", err)
		}
		if got := loadWithin(t, dir); !strings.Contains(got, ".mcp.json: not a regular file") {
			t.Errorf("got %q", got)
		}
	})
	t.Run("folder as .mcp.json", func(t *testing.T) {
		dir := writePlugin(t, map[string]string{"plugin.json": `{"name":"dir"}`, ".mcp.json/x": ""})
		if got := loadWithin(t, dir); !strings.Contains(got, ".mcp.json: not a regular file") {
			t.Errorf("got %q", got)
		}
	})
}

func TestFilesOverOneMiBRefused(t *testing.T) {
	big := `{"s":{"command":"x","args":["` + strings.Repeat("a", MaxFileSize) + `"]}}`
	got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"big"}`, ".mcp.json": big}))
	if !strings.Contains(got, ".mcp.json: larger than 1048576 bytes") {
		t.Errorf("got %.200s", got)
	}
	got = loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"big","description":"` + strings.Repeat("d", MaxFileSize) + `"}`}))
	if !strings.Contains(got, "plugin.json: larger than") {
		t.Errorf("got %.200s", got)
	}
	// Exactly at the limit is fine.
	pad := MaxFileSize - len(`{"name":"big","description":""}`)
	mustLoad(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"big","description":"` + strings.Repeat("d", pad) + `"}`}))
}

// Claude Code installs a plugin whose name has capitals ("Notion" is published
// so); the node reads the name in lower case, says so, and keeps the name as
// written for display. A name that is not kebab-case in lower case either is
// still refused (above).
func TestNameWithCapitalsIsReadInLowerCase(t *testing.T) {
	for _, tc := range []struct {
		file, name, display string
		said                bool
	}{
		{`{"name":"Notion"}`, "notion", "Notion", true},
		{`{"name":"RevenueCat","displayName":"Revenue Cat"}`, "revenuecat", "Revenue Cat", true},
		{`{"name":"notion"}`, "notion", "", false},
	} {
		m := mustLoad(t, writePlugin(t, map[string]string{"plugin.json": tc.file}))
		if m.Name != tc.name || m.DisplayName != tc.display {
			t.Errorf("%s: name %q display %q, want %q %q", tc.file, m.Name, m.DisplayName, tc.name, tc.display)
		}
		if said := hasWarning(m.Notices, "name", "plugin names on the node are lower-case"); said != tc.said {
			t.Errorf("%s: notices %v", tc.file, m.Notices)
		}
	}
}

func TestManifestErrorsNameFileAndField(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  []string
	}{
		"not an object":    {map[string]string{"plugin.json": `[1]`}, []string{"plugin.json: must be a JSON object"}},
		"trailing data":    {map[string]string{"plugin.json": `{"name":"a"}}`}, []string{"plugin.json: invalid JSON: data after the top-level value"}},
		"trailing value":   {map[string]string{"plugin.json": `{"name":"a"} {}`}, []string{"plugin.json: invalid JSON: data after"}},
		"name required":    {map[string]string{"plugin.json": `{}`}, []string{"plugin.json: name: is required"}},
		"name empty":       {map[string]string{"plugin.json": `{"name":""}`}, []string{"plugin.json: name: must not be empty"}},
		"name type":        {map[string]string{"plugin.json": `{"name":7}`}, []string{"plugin.json: name: must be a string"}},
		"name long":        {map[string]string{"plugin.json": `{"name":"` + strings.Repeat("a", 65) + `"}`}, []string{"plugin.json: name: longer than 64"}},
		"name hyphens":     {map[string]string{"plugin.json": `{"name":"a--b"}`}, []string{"plugin.json: name: \"a--b\": must be kebab-case"}},
		"name capitals":    {map[string]string{"plugin.json": `{"name":"My Plugin"}`}, []string{"plugin.json: name: \"My Plugin\": must be kebab-case"}},
		"name reserved":    {map[string]string{"plugin.json": `{"name":"Current"}`}, []string{`plugin.json: name: "current" is reserved`}},
		"reserved":         {map[string]string{"plugin.json": `{"name":"current"}`}, []string{`plugin.json: name: "current" is reserved`}},
		"namespace":        {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"namespace":"Example"}}}`}, []string{`extensions."ai.oz0".namespace: "Example": must be dotted`}},
		"namespace sub":    {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"namespace":"ai.oz0.tools"}}}`}, []string{`"ai.oz0.tools" is reserved for first-party plugins`}},
		"isolation":        {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"isolation":"kata"}}}`}, []string{`plugin.json: extensions."ai.oz0".isolation: "kata": must be "gvisor" or absent`}},
		"unknown ext key":  {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"sandbox":"host"}}}`}, []string{`plugin.json: extensions."ai.oz0".sandbox: unknown key`}},
		"orphan server":    {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"servers":{"ghost":{}}}}}`}, []string{`plugin.json: extensions."ai.oz0".servers.ghost: names no server`}},
		"server ext keys":  {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"servers":{"s":{"user":"root"}}}}}`, ".mcp.json": `{"s":{"command":"x"}}`}, []string{`extensions."ai.oz0".servers.s.user: unknown key`}},
		"limits":           {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"servers":{"s":{"limits":{"memory_mb":0,"pids":1.5}}}}}}`, ".mcp.json": `{"s":{"command":"x"}}`}, []string{`extensions."ai.oz0".servers.s.limits.memory_mb: must be a whole number`, `servers.s.limits.pids: must be a whole number`}},
		"server egress":    {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"servers":{"s":{"egress":[{"host":"127.0.0.1"}]}}}}}`, ".mcp.json": `{"s":{"command":"x"}}`}, []string{`extensions."ai.oz0".servers.s.egress[0].host: "127.0.0.1": local and private`}},
		"egress type":      {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":"example.com"}}}`}, []string{`extensions."ai.oz0".egress: must be an array`}},
		"egress host port": {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":[{"host":"example.com:443"}]}}}`}, []string{`egress[0].host: "example.com:443": give ports in "ports"`}},
		"secret host":      {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"secrets":{"K":{"hosts":["*.example.com","10.0.0.1"]}}}}}`}, []string{`extensions."ai.oz0".secrets.K.hosts[0]: wildcards are not allowed`, `extensions."ai.oz0".secrets.K.hosts[1]`}},
		"secret shape":     {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"secrets":{"a-b":{},"K":{"body":"yes","hosts":[],"port":1}}}}}`}, []string{`secrets.a-b: a secret's key is`, `secrets.K.body: must be true or false`, `secrets.K.hosts: names no host`, `secrets.K.port: unknown key`}},
		"egress key":       {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":[{"host":"example.com","port":443}]}}}`}, []string{`egress[0].port: unknown key`}},
		"egress ports":     {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":[{"host":"example.com","ports":[0,"80",443.5]}]}}}`}, []string{`egress[0].ports[0]: must be a port`, `egress[0].ports[1]: must be a port`, `egress[0].ports[2]: must be a port`}},
		"server type":      {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":"python3"}`}, []string{`.mcp.json: s: must be an object`}},
		"server name":      {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s/x":{"command":"x"},"s x":{"command":"y"}}`}, []string{`.mcp.json: s/x: server names "s x" and "s/x" both become "s_x"`}},
		"remote server":    {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"type":"http","url":"ftp://x","command":"c"}}`}, []string{`.mcp.json: s.url: "ftp://x": the scheme must be http or https`, `.mcp.json: s.command: a remote server has a url, not a command`}},
		"ws server":        {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"type":"ws","url":"wss://x"}}`}, []string{`.mcp.json: s.type: "ws": WebSocket servers are not supported`}},
		"stdio with url":   {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"command":"c","url":"https://x"}}`}, []string{`.mcp.json: s.url: a stdio server has a command, not a url`}},
		"args type":        {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"command":"x","args":["a",1]}}`}, []string{`.mcp.json: s.args[1]: must be a string`}},
		"env value":        {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"command":"x","env":{"A":1}}}`}, []string{`.mcp.json: s.env.A: must be a string`}},
		"nul":              {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":{"command":"x\u0000y"}}`}, []string{`.mcp.json: s.command: contains a NUL byte`}},
		"mcpServers type":  {map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"mcpServers":[]}`}, []string{`.mcp.json: mcpServers: must be an object`}},
		"dup in manifest":  {map[string]string{"plugin.json": `{"name":"a","name":"b"}`}, []string{`plugin.json: name: duplicate key`}},
		"dup nested":       {map[string]string{"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":[{"host":"a.example.com","host":"b.example.com"}]}}}`}, []string{`plugin.json: extensions.ai.oz0.egress[0].host: duplicate key`}},
		"author":           {map[string]string{"plugin.json": `{"name":"a","author":5}`}, []string{`plugin.json: author: must be a string or an object`}},
	} {
		t.Run(name, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, tc.files))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got\n  %s\nwant it to contain\n  %s", got, w)
				}
			}
		})
	}
}

func TestEveryErrorIsReportedNotJustTheFirst(t *testing.T) {
	got := loadErr(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"Bad Name","extensions":{"ai.oz0":{"egress":[{"host":"*"},{"host":"localhost"}]}}}`,
		".mcp.json":   `{"s":{"command":1}}`,
	}))
	for _, w := range []string{"name:", "egress[0].host", "egress[1].host", ".mcp.json: s.command"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in\n%s", w, got)
		}
	}
}

func TestReservedNamespaceAllowedForFirstParty(t *testing.T) {
	dir := extract(t, "reserved-namespace")
	m, err := Load(dir, Options{FirstParty: true})
	if err != nil {
		t.Fatalf("first-party load: %v", err)
	}
	if m.ID() != "ai.oz0/fake-first-party" {
		t.Errorf("ID %q", m.ID())
	}
}

func TestEgressAndServerExtensionsParsed(t *testing.T) {
	m := mustLoad(t, extract(t, "egress-demo"))
	if m.ID() != "dev.oz0-fixtures/egress-demo" {
		t.Errorf("ID %q", m.ID())
	}
	if len(m.Egress) != 3 || m.Egress[0].Host != "api.example.com" || len(m.Egress[0].Ports) != 1 || m.Egress[0].Ports[0] != 443 || m.Egress[1].Host != ".cdn.example.net" || m.Egress[0].Reason == "" {
		t.Errorf("egress %+v", m.Egress)
	}
	s := m.Server("fetcher")
	if s == nil || s.Limits.MemoryMB != 256 || s.Limits.Pids != 64 || s.Reason != "fetches API data" || s.Egress != nil {
		t.Errorf("fetcher %+v", s)
	}
	ps, err := Patterns(m.Egress)
	if err != nil || len(ps) != 3 || !ps[1].Match("static.cdn.example.net", 80) || ps[1].Match("static.cdn.example.net", 22) || !ps[2].Match("allowed.test", 1) {
		t.Errorf("patterns %+v, %v", ps, err)
	}
	// Hosts are stored canonical; a server's empty egress list stays non-nil (it
	// narrows to nothing).
	m = mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"a","extensions":{"ai.oz0":{"egress":[{"host":"API.Bücher.Example."}],"servers":{"s":{"egress":[]}}}}}`,
		".mcp.json":   `{"s":{"command":"x"}}`,
	}))
	if m.Egress[0].Host != "api.xn--bcher-kva.example" {
		t.Errorf("host %q not canonical", m.Egress[0].Host)
	}
	if s := m.Server("s"); s.Egress == nil || len(s.Egress) != 0 {
		t.Errorf("server egress %#v, want an empty non-nil list", s.Egress)
	}
}

func TestHostAndOwnSandboxKindsParsed(t *testing.T) {
	if s := mustLoad(t, extract(t, "host-health")).Server("health"); s == nil || s.Sandbox != SandboxHost || s.Reason == "" {
		t.Errorf("host-health server %+v", s)
	}
	if s := mustLoad(t, extract(t, "own-sandbox")).Server("runner"); s == nil || s.Sandbox != SandboxOwn {
		t.Errorf("own-sandbox server %+v", s)
	}
}

func TestLoadOfAMissingFolderIsAnError(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope"), Options{})
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err %v", err)
	}
}

// swappedFS reports every file as the regular file plugin.json was, as if a FIFO
// had been swapped in between the type check and the open.
type swappedFS struct {
	pluginFS
	regular fs.FileInfo
}

func (s swappedFS) Stat(string) (fs.FileInfo, error) { return s.regular, nil }

func TestFIFOSwappedInAfterTheCheckIsRefusedWithoutBlocking(t *testing.T) {
	dir := writePlugin(t, map[string]string{"plugin.json": `{"name":"swap"}`})
	if err := syscall.Mkfifo(filepath.Join(dir, ".mcp.json"), 0o644); err != nil {
		t.Skipf("mkfifo: %v (swap case not tested)", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	regular, err := root.Stat("plugin.json")
	if err != nil {
		t.Fatal(err)
	}
	fsys := swappedFS{pluginFS{StatFS: root.FS().(fs.StatFS), root: root}, regular}
	done := make(chan error, 1)
	go func() { _, err := readFile(fsys, ".mcp.json"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
}

func TestValidNameIsKebabCaseUpToMaxLen(t *testing.T) {
	for name, want := range map[string]bool{
		"demo": true, "claude-hooks": true, "a1-b2": true, strings.Repeat("a", MaxNameLen): true,
		"": false, "Demo": false, "-demo": false, "demo-": false, "de--mo": false, "de_mo": false,
		"de.mo": false, "../demo": false, "demo@abc1234": false, strings.Repeat("a", MaxNameLen+1): false,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}
