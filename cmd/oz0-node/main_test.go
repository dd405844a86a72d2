package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"oz0.ai/node/fixtures"
)

// cliEnv makes the test binary itself run the real main() (exit codes, stderr and
// all) when it is started by cliRun.
const cliEnv = "OZ0_NODE_CLI_TEST_MAIN"

func init() {
	if os.Getenv(cliEnv) == "1" {
		os.Unsetenv(cliEnv)
		main()
	}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// cliRun runs `oz0-node args…` as a separate process with a fresh data folder.
func cliRun(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1", "OZ0_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run oz0-node %q: %v", args, err)
	}
	return r
}

func (r cliResult) String() string {
	return "exit " + string(rune('0'+r.code)) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// commandPaths lists every command of the tree ("plugin lint", "service unit", …).
func commandPaths() [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		out = append(out, path)
		for _, s := range c.Commands() {
			walk(s, append(append([]string(nil), path...), s.Name()))
		}
	}
	walk(newRootCmd(), nil)
	return out
}

func TestHelpOfEveryCommandExitsZero(t *testing.T) {
	paths := commandPaths()
	for _, want := range []string{"run", "status", "findings", "plugin lint", "plugin install", "exec", "sandbox show", "call", "mcp", "tui", "service install", "service unit", "version"} {
		found := false
		for _, p := range paths {
			found = found || strings.Join(p, " ") == want
		}
		if !found {
			t.Errorf("no command %q in the tree", want)
		}
	}
	for _, p := range paths {
		name := strings.Join(append([]string{"oz0-node"}, p...), " ")
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, append(append([]string(nil), p...), "--help")...)
			if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, name) {
				t.Errorf("%s --help:\n%s", name, r)
			}
			if r.stderr != "" {
				t.Errorf("%s --help wrote to stderr: %s", name, r.stderr)
			}
		})
	}
}

func TestVersionPrintsAndExitsZero(t *testing.T) {
	r := cliRun(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "oz0-node ") {
		t.Errorf("%s", r)
	}
}

func extractFixture(t *testing.T, name string) string {
	t.Helper()
	dir, err := fixtures.Extract(name, filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPluginLintOfEachInvalidFixtureExitsOneNamingTheField(t *testing.T) {
	for _, name := range fixtures.Invalid() {
		t.Run(name, func(t *testing.T) {
			dir := extractFixture(t, name)
			r := cliRun(t, "plugin", "lint", dir)
			want := fixtures.Expect(name)
			if r.code != 1 {
				t.Errorf("exit %d, want 1\n%s", r.code, r)
			}
			if !strings.Contains(r.stdout, "error: "+want) {
				t.Errorf("output lacks %q:\n%s", "error: "+want, r)
			}
			if !strings.Contains(r.stderr, dir) || !strings.Contains(r.stderr, "error") {
				t.Errorf("stderr does not sum up the errors of %s:\n%s", dir, r.stderr)
			}
		})
	}
}

func TestPluginLintOfEachValidFixtureExitsZero(t *testing.T) {
	for _, name := range fixtures.Valid() {
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, "plugin", "lint", extractFixture(t, name))
			if r.code != 0 || !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, ": ok (") || strings.Contains(r.stdout, "error:") {
				t.Errorf("%s", r)
			}
		})
	}
}

func TestPluginLintWarnsAboutSandboxHost(t *testing.T) {
	r := cliRun(t, "plugin", "lint", extractFixture(t, "host-health"))
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	var warning string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "warning: ") && strings.Contains(l, "sandbox: host") {
			warning = l
		}
	}
	if warning == "" || !strings.Contains(warning, "--plugin-sandbox-exempt host-health") || !strings.Contains(warning, "servers.health.sandbox") {
		t.Errorf("no sandbox: host warning naming the server and the exemption flag:\n%s", r)
	}
	if !strings.Contains(r.stdout, "1 warnings") {
		t.Errorf("summary does not count the warning:\n%s", r.stdout)
	}
}

type lintJSON struct {
	OK          bool   `json:"ok"`
	Plugin      string `json:"plugin"`
	Diagnostics []struct {
		Severity string `json:"severity"`
		File     string `json:"file"`
		Field    string `json:"field"`
		Message  string `json:"message"`
	} `json:"diagnostics"`
}

func TestPluginLintJSONParses(t *testing.T) {
	for name, tc := range map[string]struct {
		code     int
		ok       bool
		plugin   string
		severity string
		field    string
	}{
		"host-health":  {0, true, "dev.oz0-fixtures/host-health", "warning", `extensions."ai.oz0".servers.health.sandbox`},
		"command-type": {1, false, "", "error", "mcpServers.db.command"},
		"demo":         {0, true, "dev.oz0-fixtures/demo", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, "plugin", "lint", "--json", extractFixture(t, name))
			if r.code != tc.code {
				t.Errorf("exit %d, want %d\n%s", r.code, tc.code, r)
			}
			var got lintJSON
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("--json output does not parse: %v\n%s", err, r.stdout)
			}
			if got.OK != tc.ok || got.Plugin != tc.plugin || got.Diagnostics == nil {
				t.Errorf("%+v", got)
			}
			if tc.severity == "" {
				if len(got.Diagnostics) != 0 {
					t.Errorf("diagnostics %+v", got.Diagnostics)
				}
				return
			}
			found := false
			for _, d := range got.Diagnostics {
				found = found || (d.Severity == tc.severity && d.Field == tc.field && d.File != "" && d.Message != "")
			}
			if !found {
				t.Errorf("no %s diagnostic for %s in %+v", tc.severity, tc.field, got.Diagnostics)
			}
		})
	}
}

func TestPluginLintOfAMissingFolderFails(t *testing.T) {
	r := cliRun(t, "plugin", "lint", filepath.Join(t.TempDir(), "nope"))
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "nope") {
		t.Errorf("%s", r)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":                {"status", "--bogus"},
		"unknown global flag":         {"--no-such-flag", "version"},
		"lint without a path":         {"plugin", "lint"},
		"lint with two paths":         {"plugin", "lint", "a", "b"},
		"status with an argument":     {"status", "extra"},
		"bad --plugin-sandbox":        {"run", "--plugin-sandbox", "loose"},
		"bad --plugin-sandbox-exempt": {"run", "--plugin-sandbox-exempt", "Bad_Name"},
		"bad --backend":               {"run", "--backend", "docker"},
		"bad --label":                 {"run", "--label", "nolabel"},
		"service unit bad mode":       {"service", "unit", "--plugin-sandbox", "sometimes"},
		"flag without value":          {"run", "--plugin-sandbox"},
		"unknown command":             {"bogus"},
		"unknown plugin subcommand":   {"plugin", "bogus"},
		"unknown service subcommand":  {"service", "bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			r := cliRun(t, args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2\n%s", r.code, r)
			}
			if !strings.HasPrefix(r.stderr, "oz0-node: ") || r.stdout != "" {
				t.Errorf("usage error not on stderr alone:\n%s", r)
			}
		})
	}
	r := cliRun(t, "run", "--plugin-sandbox", "loose")
	if !strings.Contains(r.stderr, "--plugin-sandbox") || !strings.Contains(r.stderr, "strict, auto or off") {
		t.Errorf("bad mode message does not name the flag and the choices: %s", r.stderr)
	}
}

func TestStatusWithoutARunningNodeSaysHowToStartIt(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"findings"}} {
		r := cliRun(t, args...)
		if r.code != 1 {
			t.Errorf("%q: exit %d, want 1\n%s", args, r.code, r)
		}
		if !strings.Contains(r.stderr, "not running") || !strings.Contains(r.stderr, "oz0-node run") {
			t.Errorf("%q does not say the node is not running and how to start it:\n%s", args, r)
		}
		if r.stdout != "" {
			t.Errorf("%q printed to stdout: %q", args, r.stdout)
		}
	}
}

func TestDataDirFlagOverridesTheEnvironment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "flagged")
	r := cliRun(t, "--data-dir", dir, "status")
	if r.code != 1 || !strings.Contains(r.stderr, dir) {
		t.Errorf("status does not use --data-dir %s:\n%s", dir, r)
	}
}

func TestPluginLintFirstPartyAllowsTheReservedNamespace(t *testing.T) {
	dir := extractFixture(t, "reserved-namespace")
	if r := cliRun(t, "plugin", "lint", dir); r.code != 1 {
		t.Errorf("without --first-party: %s", r)
	}
	if r := cliRun(t, "plugin", "lint", "--first-party", dir); r.code != 0 || !strings.Contains(r.stdout, "ai.oz0/fake-first-party") {
		t.Errorf("with --first-party: %s", r)
	}
}
