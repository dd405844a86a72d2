package install

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"oz0.ai/node/internal/testbin"
	"oz0.ai/node/node/installed"
)

// cli is the real oz0-node binary (internal/testbin): these tests go through the
// command line, as an operator does.
func cli(t *testing.T) string {
	t.Helper()
	return testbin.Node(t)
}

// oz runs the binary with stdin not a terminal and returns output and exit code.
func oz(t *testing.T, data string, args ...string) (string, int) {
	t.Helper()
	c := exec.Command(cli(t), append([]string{"--data-dir", data}, args...)...)
	c.Env = append(os.Environ(), "SUDO_USER=")
	c.Stdin = strings.NewReader("y\n")
	out, err := c.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestCLIInstallListShowRemove(t *testing.T) {
	d := newData(t)
	repo, c1 := newRepo(t, "demo", nil)
	c2 := commitFiles(t, repo, map[string]string{"NEW": "x"})

	out, code := oz(t, d.Root, "plugin", "install", repo, "--commit", c1, "--by", "tester")
	if code != 0 || !strings.Contains(out, "installed demo at "+c1) {
		t.Fatalf("install: %d %s", code, out)
	}
	if out, code = oz(t, d.Root, "plugin", "install", repo, "--commit", c1); code != 0 || !strings.Contains(out, "already installed") {
		t.Fatalf("reinstall: %d %s", code, out)
	}
	if out, code = oz(t, d.Root, "plugin", "install", repo, "--ref", "main", "--by", "tester2"); code != 0 || !strings.Contains(out, c2) {
		t.Fatalf("update: %d %s", code, out)
	}
	out, code = oz(t, d.Root, "plugin", "list")
	if code != 0 || !strings.Contains(out, "demo") || !strings.Contains(out, c2[:12]) || !strings.Contains(out, "tester2") {
		t.Fatalf("list: %d %s", code, out)
	}
	out, _ = oz(t, d.Root, "plugin", "list", "--json")
	var list struct{ Plugins []installed.Plugin }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Plugins) != 1 || list.Plugins[0].Commit != c2 {
		t.Fatalf("list --json: %v %s", err, out)
	}
	out, code = oz(t, d.Root, "plugin", "show", "demo")
	for _, want := range []string{"demo at " + c2, "server ", "install ", "update ", "by tester2", "decision (--plugin-sandbox strict)", "package code false"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("show: no %q in (exit %d)\n%s", want, code, out)
		}
	}
	out, _ = oz(t, d.Root, "plugin", "show", "demo", "--json", "--plugin-sandbox-exempt", "demo")
	var show struct {
		Decision struct {
			Exempt bool `json:"exempt"`
			Build  struct {
				PackageCode bool `json:"package_code"`
			} `json:"build"`
		} `json:"decision"`
		Ledger []installed.LedgerEntry `json:"ledger"`
	}
	if err := json.Unmarshal([]byte(out), &show); err != nil || !show.Decision.Exempt || !show.Decision.Build.PackageCode || len(show.Ledger) != 2 {
		t.Fatalf("show --json: %v %s", err, out)
	}

	if out, code = oz(t, d.Root, "plugin", "remove", "demo"); code != 2 || !strings.Contains(out, "--yes") {
		t.Fatalf("remove without a terminal or --yes: %d %s", code, out)
	}
	if _, err := installed.Lookup(d, "demo"); err != nil {
		t.Fatal("a refused remove removed the plugin")
	}
	if out, code = oz(t, d.Root, "plugin", "remove", "demo", "--yes", "--by", "ops"); code != 0 || !strings.Contains(out, "removed demo") {
		t.Fatalf("remove: %d %s", code, out)
	}
	if out, _ = oz(t, d.Root, "plugin", "list"); !strings.Contains(out, "no plugins installed") {
		t.Fatalf("list after remove: %s", out)
	}
	if out, code = oz(t, d.Root, "plugin", "show", "demo"); code != 1 || !strings.Contains(out, "not installed") {
		t.Fatalf("show after remove: %d %s", code, out)
	}
	es := ledger(t, d, "demo")
	if len(es) != 3 || es[2].Action != installed.ActionRemove || es[2].Who != "ops" {
		t.Fatalf("ledger: %+v", es)
	}

	// A refused build is a clear error naming the backend and the exemption.
	py, _ := newRepo(t, "py-build-marker", runsSomething)
	if out, code = oz(t, d.Root, "plugin", "install", py); code != 1 || !strings.Contains(out, "--plugin-sandbox-exempt py-build-marker@") {
		t.Fatalf("strict build refusal: %d %s", code, out)
	}
	if out, code = oz(t, d.Root, "plugin", "install", py, "--plugin-sandbox", "bogus"); code != 2 {
		t.Fatalf("bad mode: %d %s", code, out)
	}
}
