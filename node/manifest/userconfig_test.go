package manifest

import (
	"reflect"
	"strings"
	"testing"
)

func TestUserConfigParsed(t *testing.T) {
	m, diags := warningsOf(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"uc","userConfig":{
		"api_endpoint":{"type":"string","title":"API endpoint","description":"Where the server talks to.","default":"https://api.example.com"},
		"api_token":{"type":"string","title":"API token","sensitive":true,"required":true},
		"max_results":{"type":"number","title":"Maximum results","default":50,"min":1,"max":500},
		"verbose":{"type":"boolean","title":"Verbose","default":false},
		"roots":{"type":"directory","title":"Roots","multiple":true,"default":["/srv","/data"]},
		"cert":{"type":"file","title":"CA file"}}}`}))
	if got := m.UserConfigKeys(); !reflect.DeepEqual(got, []string{"api_endpoint", "api_token", "cert", "max_results", "roots", "verbose"}) {
		t.Fatalf("keys %v", got)
	}
	one, five := 1.0, 500.0
	if got, want := m.UserConfig["max_results"], (UserConfigOption{Key: "max_results", Type: "number", Title: "Maximum results", Default: 50.0, Min: &one, Max: &five}); !reflect.DeepEqual(got, want) {
		t.Errorf("max_results %+v", got)
	}
	if !m.Sensitive("user_config.api_token") || m.Sensitive("user_config.api_endpoint") || m.Sensitive("api_token") || m.Sensitive("user_config.nope") {
		t.Error("Sensitive")
	}
	tok := m.UserConfig["api_token"]
	if !tok.Sensitive || !tok.Required || !tok.NeedsValue() || tok.Default != nil {
		t.Errorf("api_token %+v", tok)
	}
	for key, want := range map[string]string{"api_endpoint": "https://api.example.com", "max_results": "50", "verbose": "false", "roots": "/srv,/data"} {
		o := m.UserConfig[key]
		if d, ok := o.DefaultText(); !ok || d != want || o.NeedsValue() {
			t.Errorf("%s default %q %v", key, d, ok)
		}
	}
	if len(diags) != 1 || !strings.Contains(diags[0].Message, "no MCP servers") {
		t.Errorf("diagnostics %v", diags)
	}
}

func TestUserConfigErrorsNameTheOption(t *testing.T) {
	for name, tc := range map[string]struct{ uc, want string }{
		"key":          {`{"api-token":{"type":"string","title":"T"}}`, `userConfig.api-token: a userConfig key is letters, digits and '_'`},
		"no type":      {`{"limit":{"title":"Limit"}}`, `userConfig.limit.type: is required`},
		"bad type":     {`{"color":{"type":"rainbow","title":"C"}}`, `userConfig.color.type: "rainbow": must be one of string, number, boolean, directory, file`},
		"no title":     {`{"k":{"type":"string"}}`, `userConfig.k.title: is required`},
		"unknown key":  {`{"k":{"type":"string","title":"K","secret":true}}`, `userConfig.k.secret: unknown key`},
		"multiple num": {`{"k":{"type":"number","title":"K","multiple":true}}`, `userConfig.k.multiple: only string, directory and file options take several values`},
		"default type": {`{"k":{"type":"number","title":"K","default":"ten"}}`, `userConfig.k.default: must be a number`},
		"default list": {`{"k":{"type":"string","title":"K","multiple":true,"default":"a"}}`, `userConfig.k.default: must be a list of string values`},
		"out of range": {`{"k":{"type":"number","title":"K","min":1,"max":5,"default":9}}`, `userConfig.k.default: 9 is outside the option's min and max`},
		"min max":      {`{"k":{"type":"number","title":"K","min":5,"max":1}}`, `userConfig.k.max: is below min`},
		"min on str":   {`{"k":{"type":"string","title":"K","min":1}}`, `userConfig.k.min: only a number option has a min`},
		"flag type":    {`{"k":{"type":"string","title":"K","sensitive":"yes"}}`, `userConfig.k.sensitive: must be true or false`},
		"not object":   {`[]`, `userConfig: must be an object of options`},
	} {
		t.Run(name, func(t *testing.T) {
			got := loadErr(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"uc","userConfig":` + tc.uc + `}`}))
			if !strings.Contains(got, ".claude-plugin/plugin.json: "+tc.want) {
				t.Errorf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func TestUserConfigLintsSecretsNotMarkedSensitive(t *testing.T) {
	_, diags := warningsOf(t, writePlugin(t, map[string]string{".claude-plugin/plugin.json": `{"name":"uc","userConfig":{
		"api_token":{"type":"string","title":"Token"},
		"db_password":{"type":"string","title":"P","sensitive":true,"default":"hunter2"},
		"region":{"type":"string","title":"Region"}}}`}))
	if d, ok := findDiag(diags, "userConfig.api_token.sensitive"); !ok || !strings.Contains(d.Message, "looks like a secret") {
		t.Errorf("diagnostics %v", diags)
	}
	if d, ok := findDiag(diags, "userConfig.db_password.default"); !ok || !strings.Contains(d.Message, "public") {
		t.Errorf("diagnostics %v", diags)
	}
	if _, ok := findDiag(diags, "userConfig.region.sensitive"); ok {
		t.Errorf("region warned about: %v", diags)
	}
}
