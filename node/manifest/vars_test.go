package manifest

import (
	"reflect"
	"strings"
	"testing"
)

func TestRefsReadsClaudeCodeReferenceSyntax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Ref
		err  string
	}{
		{in: "plain", want: nil},
		{in: "${API_KEY}", want: []Ref{{Name: "API_KEY"}}},
		{in: "--url=${BASE:-https://x.example/a:b}/v1", want: []Ref{{Name: "BASE", Default: "https://x.example/a:b", HasDefault: true}}},
		{in: "${EMPTY:-}", want: []Ref{{Name: "EMPTY", HasDefault: true}}},
		{in: "Bearer ${user_config.api_token}", want: []Ref{{Name: "user_config.api_token"}}},
		{in: "${HOME}/.cache/${CLAUDE_PLUGIN_DATA}", want: []Ref{{Name: "HOME"}, {Name: "CLAUDE_PLUGIN_DATA"}}},
		{in: "$HOME and $(id) are not references", want: nil},
		{in: "${A", err: "unterminated"},
		{in: "${}", err: "not a variable name"},
		{in: "${1A}", err: "not a variable name"},
		{in: "${A B}", err: "not a variable name"},
		{in: "${user_config.}", err: "userConfig key"},
		{in: "${user_config.a-b}", err: "userConfig key"},
		{in: "${A:-x${B}}", want: []Ref{{Name: "A", Default: "x${B", HasDefault: true}}},
	} {
		got, err := Refs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Refs(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Refs(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandUsesLookupThenDefaultAndListsMissing(t *testing.T) {
	vals := map[string]string{"A": "1", "user_config.k": "v", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vals[n]; return v, ok }
	for _, tc := range []struct {
		in, want string
		missing  []string
	}{
		{"x", "x", nil},
		{"${A}", "1", nil},
		{"${A:-d}", "1", nil},
		{"${B:-d}", "d", nil},
		{"${EMPTY:-d}", "", nil}, // a value set to "" is a value
		{"${user_config.k}/${user_config.k}", "v/v", nil},
		{"a${B}b${C}c${B}", "abc", []string{"B", "C"}},
		{"${A", "${A", nil},
		{"${A B}${A}", "${A B}1", nil},
		{"$${A}", "$1", nil},
	} {
		got, missing := Expand(tc.in, lookup)
		if got != tc.want || !reflect.DeepEqual(missing, tc.missing) {
			t.Errorf("Expand(%q) = %q, %v; want %q, %v", tc.in, got, missing, tc.want, tc.missing)
		}
	}
}

// Values are the operator's: the node's own environment never fills a reference.
func TestExpandNeverReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv("OZ0_TEST_SECRET", "from-the-node")
	t.Setenv("HOME", "/root-of-the-node")
	got, missing := Expand("${OZ0_TEST_SECRET}", nil)
	if got != "" || !reflect.DeepEqual(missing, []string{"OZ0_TEST_SECRET"}) {
		t.Errorf("Expand = %q, %v", got, missing)
	}
	m := mustLoad(t, writePlugin(t, map[string]string{
		"plugin.json": `{"name":"envy"}`,
		".mcp.json":   `{"s":{"command":"x","env":{"T":"${OZ0_TEST_SECRET}","H":"${HOME}"}}}`,
	}))
	e, issues := m.ExpandAll(Vars{Root: "/r", Data: "/home-of-the-plugin"}, nil)
	if e.Servers[0].Env["T"] != "" || e.Servers[0].Env["H"] != "/home-of-the-plugin" {
		t.Errorf("env %v", e.Servers[0].Env)
	}
	if len(issues) != 1 || issues[0].Name != "OZ0_TEST_SECRET" || issues[0].Server != "s" || issues[0].Field != "env.T" {
		t.Errorf("issues %+v", issues)
	}
}

func TestExpandAllResolvesEveryFieldInOrderOfSources(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"cfg","userConfig":{
			"endpoint":{"type":"string","title":"Endpoint","default":"https://api.example.com"},
			"token":{"type":"string","title":"Token","sensitive":true,"required":true},
			"limit":{"type":"number","title":"Limit","default":50},
			"dirs":{"type":"directory","title":"Dirs","multiple":true,"default":["/a","/b"]}}}`,
		".mcp.json": `{"mcpServers":{
			"local":{"command":"${CLAUDE_PLUGIN_ROOT}/bin/srv","args":["--limit=${user_config.limit}","--dirs=${user_config.dirs}","--level=${LEVEL:-info}"],
				"env":{"TOKEN":"${user_config.token}","CACHE":"${HOME}/cache"},"cwd":"${CLAUDE_PLUGIN_DATA}"},
			"api":{"type":"http","url":"${user_config.endpoint}/mcp","headers":{"Authorization":"Bearer ${user_config.token}","X-Region":"${REGION:-eu}"}}}}`,
		"hooks/hooks.json": `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"${CLAUDE_PLUGIN_ROOT}/h.sh","args":["${user_config.token}"]}]}]}}`,
	}))
	v := Vars{Root: "/p", Data: "/h"}
	_, issues := m.ExpandAll(v, nil)
	want := []Unresolved{
		{Server: "api", Hook: -1, Field: "headers.Authorization", Name: "user_config.token"},
		{Server: "local", Hook: -1, Field: "env.TOKEN", Name: "user_config.token"},
		{Server: "", Hook: 0, Field: "args[0]", Name: "user_config.token"},
	}
	if !reflect.DeepEqual(issues, want) {
		t.Errorf("issues without values\n %+v\nwant\n %+v", issues, want)
	}
	vals := map[string]string{"user_config.token": "s3cr3t", "user_config.endpoint": "https://eu.example.com", "LEVEL": "debug"}
	e, issues := m.ExpandAll(v, func(n string) (string, bool) { x, ok := vals[n]; return x, ok })
	if len(issues) != 0 {
		t.Fatalf("issues %+v", issues)
	}
	api, local := e.Servers[0], e.Servers[1]
	if api.Remote.URL != "https://eu.example.com/mcp" || api.Remote.Headers["Authorization"] != "Bearer s3cr3t" || api.Remote.Headers["X-Region"] != "eu" {
		t.Errorf("api %+v", api.Remote)
	}
	if local.Command != "/p/bin/srv" || local.Cwd != "/h" || local.Env["CACHE"] != "/h/cache" || local.Env["TOKEN"] != "s3cr3t" {
		t.Errorf("local %+v", local)
	}
	if !reflect.DeepEqual(local.Args, []string{"--limit=50", "--dirs=/a,/b", "--level=debug"}) {
		t.Errorf("args %q", local.Args)
	}
	if e.Hooks[0].Command != "/p/h.sh" || e.Hooks[0].Args[0] != "s3cr3t" {
		t.Errorf("hook %+v", e.Hooks[0])
	}
	// The original keeps its references.
	if m.Servers[0].Remote.URL != "${user_config.endpoint}/mcp" || m.Servers[1].Env["TOKEN"] != "${user_config.token}" {
		t.Errorf("ExpandAll changed the original")
	}
}

// A value set by the operator cannot smuggle a second header line or a URL the
// plugin did not declare the shape of: the expanded remote settings are checked.
func TestExpandAllRefusesARemoteURLOrHeaderThatIsInvalidOnceExpanded(t *testing.T) {
	m := mustLoad(t, writePlugin(t, map[string]string{
		".claude-plugin/plugin.json": `{"name":"r","userConfig":{"k":{"type":"string","title":"K"},"host":{"type":"string","title":"H"}}}`,
		".mcp.json":                  `{"a":{"type":"sse","url":"https://${user_config.host}/sse","headers":{"X-Key":"${user_config.k}"}}}`,
	}))
	for _, tc := range []struct {
		vals  map[string]string
		field string
	}{
		{map[string]string{"user_config.host": "h.example.com", "user_config.k": "v\r\nX-Injected: 1"}, "headers.X-Key"},
		{map[string]string{"user_config.host": "u:p@h.example.com", "user_config.k": "v"}, "url"},
		{map[string]string{"user_config.host": "", "user_config.k": "v"}, "url"},
		{map[string]string{"user_config.host": "h.example.com", "user_config.k": "a\x00b"}, "headers.X-Key"},
	} {
		_, issues := m.ExpandAll(Vars{}, func(n string) (string, bool) { x, ok := tc.vals[n]; return x, ok })
		if len(issues) == 0 || issues[0].Field != tc.field || issues[0].Problem == "" {
			t.Errorf("values %q: issues %+v, want a problem with %s", tc.vals, issues, tc.field)
		}
	}
	_, issues := m.ExpandAll(Vars{}, func(n string) (string, bool) {
		return map[string]string{"user_config.host": "h.example.com", "user_config.k": "v"}[n], true
	})
	if len(issues) != 0 {
		t.Errorf("valid values: %+v", issues)
	}
}
