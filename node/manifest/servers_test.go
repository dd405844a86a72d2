package manifest

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestRemoteServersInEveryPlace(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"inline": {".claude-plugin/plugin.json": `{"name":"r","mcpServers":{"api":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}}}`},
		"wrapped": {".claude-plugin/plugin.json": `{"name":"r"}`,
			".mcp.json": `{"mcpServers":{"api":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}}}`},
		"bare": {".claude-plugin/plugin.json": `{"name":"r"}`,
			".mcp.json": `{"api":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}}`},
		"path": {".claude-plugin/plugin.json": `{"name":"r","mcpServers":"./config/servers.json"}`,
			"config/servers.json": `{"api":{"type":"http","url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer x"}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			m, diags := warningsOf(t, writePlugin(t, files))
			if len(m.Servers) != 1 {
				t.Fatalf("servers %+v", m.Servers)
			}
			s := m.Servers[0]
			want := &Remote{Type: RemoteHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}}
			if !s.IsRemote() || !reflect.DeepEqual(s.Remote, want) || s.Command != "" || s.Args != nil || s.Sandbox != SandboxDefault {
				t.Errorf("server %+v remote %+v", s, s.Remote)
			}
			if s.Remote.Host() != "mcp.example.com" {
				t.Errorf("host %q", s.Remote.Host())
			}
			found := false
			for _, d := range diags {
				found = found || strings.Contains(d.Message, `server "api" is remote (http, mcp.example.com)`)
			}
			if !found {
				t.Errorf("lint does not say the server is remote: %v", diags)
			}
		})
	}
}

func TestRemoteServerShapes(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"r","userConfig":{"base":{"type":"string","title":"Base URL"},"key":{"type":"string","title":"Key","sensitive":true}}}`,
		".mcp.json": `{
			"events":{"type":"sse","url":"https://events.example.com/sse","timeout":30000},
			"typeless":{"url":"https://t.example.com/mcp"},
			"streamable":{"type":"streamable-http","url":"https://s.example.com/mcp"},
			"configured":{"type":"http","url":"${user_config.base}/mcp","headers":{"X-API-Key":"${user_config.key}"}},
			"local":{"type":"http","url":"http://127.0.0.1:8080/mcp"},
			"helper":{"type":"http","url":"https://h.example.com","headersHelper":"./get-token.sh","oauth":{"clientId":"x"}}}`,
	}))
	byName := map[string]Server{}
	for _, s := range m.Servers {
		byName[s.Name] = s
	}
	if r := byName["events"].Remote; r == nil || r.Type != RemoteSSE {
		t.Errorf("events %+v", r)
	}
	if r := byName["typeless"].Remote; r == nil || r.Type != RemoteHTTP {
		t.Errorf("typeless %+v", r)
	}
	if r := byName["streamable"].Remote; r == nil || r.Type != RemoteHTTP || !hasWarning(diags, "streamable.type", `read as Claude Code's "http"`) {
		t.Errorf("streamable %+v", r)
	}
	if r := byName["configured"].Remote; r == nil || r.Host() != "" || r.Headers["X-API-Key"] != "${user_config.key}" {
		t.Errorf("configured %+v", r)
	}
	if h := (&Remote{URL: "https://api.example.com/${user_config.base}"}).Host(); h != "api.example.com" {
		t.Errorf("host of a URL with a reference in its path: %q", h)
	}
	for field, says := range map[string]string{
		"typeless.type":        `read as type "http"`,
		"events.timeout":       "unknown server field; ignored",
		"configured.url":       "the host comes from a config value",
		"local.url":            "egress guard refuses it",
		"helper.headersHelper": "never runs it",
		"helper.oauth":         "OAuth",
	} {
		if d, ok := findDiag(diags, field); !ok || !strings.Contains(d.Message, says) {
			t.Errorf("%s: no warning saying %q in %v", field, says, diags)
		}
	}
}

// A header value that ends the header line, a header the transport owns, or
// credentials in the URL are refused where the plugin wrote them.
func TestRemoteServerInjectionRefused(t *testing.T) {
	for name, tc := range map[string]struct{ server, want string }{
		"crlf value":   {`{"type":"http","url":"https://x.example.com","headers":{"X-A":"v\r\nX-Injected: 1"}}`, `s.headers.X-A: the value of X-A holds a line break`},
		"lf value":     {`{"type":"http","url":"https://x.example.com","headers":{"X-A":"v\nHost: evil"}}`, `s.headers.X-A: the value of X-A holds a line break`},
		"name":         {`{"type":"http","url":"https://x.example.com","headers":{"X A:":"v"}}`, `s.headers.X A:: "X A:" is not a header name`},
		"host header":  {`{"type":"http","url":"https://x.example.com","headers":{"Host":"internal"}}`, `s.headers.Host: Host is set by the transport`},
		"proxy auth":   {`{"type":"sse","url":"https://x.example.com","headers":{"Proxy-Authorization":"x"}}`, `s.headers.Proxy-Authorization: Proxy-Authorization is set by the transport`},
		"credentials":  {`{"type":"http","url":"https://u:p@x.example.com"}`, `s.url: "https://u:xxxxx@x.example.com": credentials in the URL`},
		"scheme":       {`{"type":"http","url":"file:///etc/passwd"}`, `s.url: "file:///etc/passwd": the scheme must be http or https`},
		"no host":      {`{"type":"http","url":"https:///x"}`, `s.url: "https:///x": no host`},
		"no url":       {`{"type":"sse"}`, `s.url: is required`},
		"command too":  {`{"type":"http","url":"https://x.example.com","command":"sh","args":["-c","id"]}`, `s.command: a remote server has a url, not a command`},
		"cred in tmpl": {`{"type":"http","url":"https://u:${K}@x.example.com"}`, `s.url: credentials in the URL`},
		"tmpl scheme":  {`{"type":"http","url":"ftp://x.example.com/${P}"}`, `s.url: "ftp://x.example.com/x": the scheme must be http or https`},
		"bad ref":      {`{"type":"http","url":"https://${A B}.example.com"}`, `s.url: ${A B}: not a variable name`},
	} {
		t.Run(name, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"a"}`, ".mcp.json": `{"s":` + tc.server + `}`}))
			if !strings.Contains(got, ".mcp.json: "+tc.want) {
				t.Errorf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func TestServerIDMapsFreeTextToValidNames(t *testing.T) {
	for in, want := range map[string]string{
		"db":                      "db",
		"my.server-2_x":           "my.server-2_x",
		"my server":               "my_server",
		"Sentry (EU)":             "Sentry_EU",
		"  padded  ":              "padded",
		"a/b":                     "a_b",
		"../../etc":               "etc",
		"..":                      "",
		"***":                     "",
		"über-tool":               "ber-tool",
		"日本":                      "",
		"x\x00y":                  "x_y",
		"-lead":                   "lead",
		strings.Repeat("a b", 40): strings.Repeat("a_b", 21) + "a",
	} {
		got := ServerID(in)
		if got != want {
			t.Errorf("ServerID(%q) = %q, want %q", in, got, want)
		}
		if got != "" && !serverRE.MatchString(got) {
			t.Errorf("ServerID(%q) = %q is not a valid name", in, got)
		}
	}
}

func TestServerNamesWithSpacesLoadUnderTheirMappedName(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"spaces","extensions":{"ai.oz0":{"servers":{"Code Search":{"reason":"r","egress":[{"host":"api.example.com","reason":"r"}]}}}}}`,
		".mcp.json":   `{"mcpServers":{"Code Search":{"command":"x"},"plain":{"command":"y"}}}`,
	}))
	if len(m.Servers) != 2 || m.Servers[0].Name != "Code_Search" || m.Servers[0].Label != "Code Search" || m.Servers[0].DisplayName() != "Code Search" {
		t.Fatalf("servers %+v", m.Servers)
	}
	if m.Server("Code_Search") == nil || m.Server("Code Search") != m.Server("Code_Search") || len(m.Servers[0].Egress) != 1 {
		t.Errorf("the extension of the server was not applied: %+v", m.Servers[0])
	}
	if m.Servers[1].Label != "" || m.Servers[1].DisplayName() != "plain" {
		t.Errorf("plain %+v", m.Servers[1])
	}
	found := false
	for _, d := range diags {
		found = found || strings.Contains(d.Message, `"Code Search" is called "Code_Search"`)
	}
	if !found {
		t.Errorf("diagnostics %v", diags)
	}
	got := loadErr(t, writePlugin(t, map[string]string{"plugin.json": `{"name":"c"}`, ".mcp.json": `{"a b":{"command":"x"},"a_b":{"command":"y"},"a.b":{"command":"z"}}`}))
	if !strings.Contains(got, `.mcp.json: a_b: server names "a b" and "a_b" both become "a_b"`) {
		t.Errorf("got %s", got)
	}
}

// An mcpServers string naming an MCPB bundle (a path in the plugin or an http(s)
// URL, .mcpb or the older .dxt) is a bundle reference: before install it gives
// no server yet, and lint says the node fetches it at install. A pin in the
// URL's fragment is kept apart; anything else there, a non-http URL, a path out
// of the plugin or credentials in the URL are errors.
func TestMCPBBundleReferences(t *testing.T) {
	for ref, want := range map[string]Bundle{
		"./dist/server.mcpb": {Source: "dist/server.mcpb"},
		"https://github.com/o/r/releases/download/v1/tool.mcpb": {Source: "https://github.com/o/r/releases/download/v1/tool.mcpb"},
		"bundle.MCPB": {Source: "bundle.MCPB"},
		"legacy.dxt":  {Source: "legacy.dxt"},
		"https://x.example/t.mcpb#sha256=" + strings.Repeat("ab", 32): {Source: "https://x.example/t.mcpb", Pin: strings.Repeat("ab", 32)},
	} {
		m := mustLoad(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"b","mcpServers":"` + ref + `"}`}))
		want.Field, want.ID = "mcpServers", BundleID(want.Source)
		if len(m.Bundles) != 1 || m.Bundles[0] != want || len(m.Servers) != 0 || m.RunsNothing() {
			t.Errorf("%s: bundles %+v servers %v, want %+v", ref, m.Bundles, m.Servers, want)
		}
		if len(m.Notices) != 1 || !strings.Contains(m.Notices[0].Message, "is an MCPB bundle: the node fetches it at install") {
			t.Errorf("%s: notices %v", ref, m.Notices)
		}
	}
	for ref, want := range map[string]string{
		"../outside.mcpb":                     "must lie inside the plugin folder",
		"ftp://x.example/t.mcpb":              "fetched over http or https",
		"https://u:p@x.example/t.mcpb":        "credentials in the URL",
		"https://x.example/t.mcpb#latest":     "#sha256=<64 hex digits>",
		"https://x.example/t.mcpb#sha256=abc": "#sha256=<64 hex digits>",
	} {
		got := loadErr(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"b","mcpServers":"` + ref + `"}`}))
		if !strings.Contains(got, `.claude-plugin/plugin.json: mcpServers: MCPB bundle`) || !strings.Contains(got, want) {
			t.Errorf("%s: got %s, want %q", ref, got, want)
		}
	}
	got := loadErr(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"b","mcpServers":["./.mcp.json","https://x.example.com/servers.json"]}`, ".mcp.json": `{}`}))
	if !strings.Contains(got, `mcpServers[1]: "https://x.example.com/servers.json" is a URL`) {
		t.Errorf("got %s", got)
	}
}

// Once unpacked under BundleDir, a bundle's manifest.json gives the plugin a
// stdio server named after the bundle: ${__dirname} is the bundle's folder, a
// relative command is a file of the bundle, the server starts in that folder,
// "python" is the node's python3, this OS's platform_overrides apply, and the
// bundle's user_config joins the plugin's userConfig.
func TestMCPBBundleGivesItsServer(t *testing.T) {
	const url = "https://x.example/tool.mcpb"
	dir := BundleDir + "/" + BundleID(url)
	for _, c := range []struct {
		name, manifest string
		want           Server
	}{
		{"node", `{"manifest_version": "0.3", "name": "Tool Box", "version": "1.2.0", "server": {"type": "node", "entry_point": "server/index.js",
			"mcp_config": {"command": "node", "args": ["${__dirname}/server/index.js", "--key", "${user_config.api_key}"], "env": {"DATA": "${__dirname}${/}data"}}},
			"user_config": {"api_key": {"type": "string", "title": "API key", "sensitive": true, "required": true}}}`,
			Server{Name: "Tool_Box", Label: "Tool Box", Command: "node", Args: []string{"${CLAUDE_PLUGIN_ROOT}/" + dir + "/server/index.js", "--key", "${user_config.api_key}"},
				Env: map[string]string{"DATA": "${CLAUDE_PLUGIN_ROOT}/" + dir + "/data"}, Cwd: "${CLAUDE_PLUGIN_ROOT}/" + dir, Sandbox: SandboxDefault}},
		{"python without mcp_config", `{"manifest_version": "0.3", "name": "py", "version": "1", "server": {"type": "python", "entry_point": "server/main.py"}}`,
			Server{Name: "py", Command: "python3", Args: []string{"${CLAUDE_PLUGIN_ROOT}/" + dir + "/server/main.py"}, Cwd: "${CLAUDE_PLUGIN_ROOT}/" + dir, Sandbox: SandboxDefault}},
		{"python command", `{"manifest_version": "0.3", "name": "py", "version": "1", "server": {"type": "python", "entry_point": "main.py", "mcp_config": {"command": "python", "args": ["main.py"]}}}`,
			Server{Name: "py", Command: "python3", Args: []string{"main.py"}, Cwd: "${CLAUDE_PLUGIN_ROOT}/" + dir, Sandbox: SandboxDefault}},
		{"binary with override", `{"dxt_version": "0.1", "name": "bin", "version": "1", "server": {"type": "binary", "entry_point": "server/tool",
			"mcp_config": {"command": "server/tool", "args": ["--stdio"], "platform_overrides": {"linux": {"args": ["--stdio", "--linux"]}, "darwin": {"args": ["--stdio", "--mac"]}, "win32": {"command": "server/tool.exe"}}}}}`,
			Server{Name: "bin", Command: "${CLAUDE_PLUGIN_ROOT}/" + dir + "/server/tool", Args: []string{"--stdio", "--" + map[string]string{"linux": "linux", "darwin": "mac"}[runtime.GOOS]}, Cwd: "${CLAUDE_PLUGIN_ROOT}/" + dir, Sandbox: SandboxDefault}},
	} {
		m := mustLoad(t, writePlugin(t, map[string]string{
			".claude-plugin/plugin.json": `{"name":"b","mcpServers":"` + url + `"}`,
			dir + "/manifest.json":       c.manifest,
		}))
		if len(m.Servers) != 1 || !reflect.DeepEqual(m.Servers[0], c.want) {
			t.Errorf("%s: servers %+v\nwant %+v", c.name, m.Servers, c.want)
		}
		if len(m.Bundles) != 1 || m.Bundles[0].Server != c.want.Name {
			t.Errorf("%s: bundles %+v", c.name, m.Bundles)
		}
		if c.name == "node" && !m.UserConfig["api_key"].Required {
			t.Errorf("the bundle's user_config did not join the plugin's: %+v", m.UserConfig)
		}
	}
	for manifest, want := range map[string]string{
		`{"manifest_version": "0.4", "name": "u", "version": "1", "server": {"type": "uv", "entry_point": "src/server.py"}}`: `server.type "uv"`,
		`{"manifest_version": "0.3", "name": "x", "version": "1", "server": {"type": "ruby", "entry_point": "x.rb"}}`:        `must be node, python or binary`,
		`{"manifest_version": "0.3", "name": "x", "version": "1", "server": {"type": "node", "entry_point": "../x.js"}}`:     `must be a file inside the bundle`,
		`{"name": "x", "server": {"type": "node", "entry_point": "x.js"}}`:                                                   `not an MCPB bundle manifest`,
	} {
		got := loadErr(t, writePlugin(t, map[string]string{
			".claude-plugin/plugin.json": `{"name":"b","mcpServers":"` + url + `"}`,
			dir + "/manifest.json":       manifest,
		}))
		if !strings.Contains(got, dir+"/manifest.json: manifest.json: ") || !strings.Contains(got, want) {
			t.Errorf("got %s, want %q", got, want)
		}
	}
}

func TestMcpServersArrayMergesFilesAndObjects(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"arr","mcpServers":["./a.json",{"inline":{"command":"i"}}]}`,
		"a.json":                     `{"mcpServers":{"fromfile":{"command":"f"}}}`,
	}))
	if len(m.Servers) != 2 || m.Servers[0].Name != "fromfile" || m.Servers[1].Name != "inline" || m.ServersFile != "a.json" {
		t.Errorf("servers %+v from %s", m.Servers, m.ServersFile)
	}
	got := loadErr(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"arr","mcpServers":["./a.json",{"s":{"command":"i"}}]}`,
		"a.json":                     `{"s":{"command":"f"}}`,
	}))
	if !strings.Contains(got, `mcpServers[1].s: a second server named "s"`) {
		t.Errorf("got %s", got)
	}
}

func TestServerEgressOnlyNarrowingServers(t *testing.T) {
	m := &Manifest{Servers: []Server{
		{Name: "wide"},                          // the plugin's list
		{Name: "none", Egress: []EgressEntry{}}, // narrowed to nothing
		{Name: "api", Egress: []EgressEntry{{Host: "api.example.com", Ports: []int{443}}}},
	}}
	got := m.ServerEgress()
	if _, ok := got["wide"]; ok || len(got) != 2 {
		t.Fatalf("ServerEgress = %v, want none and api only", got)
	}
	if got["none"] == nil || len(got["none"]) != 0 || got["api"][0].Host != "api.example.com" {
		t.Fatalf("ServerEgress = %v", got)
	}
}
