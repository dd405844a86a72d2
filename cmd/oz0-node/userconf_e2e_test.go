package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/userconf"
)

// A plugin's values are the operator's: a server whose required value is not set
// does not start, says which key and the command that sets it, starts once the
// operator sets it, receives it, and the secret shows nowhere the node prints.
func TestE2ERequiredValueHoldsServerUntilOperatorSetsIt(t *testing.T) {
	backends := backendsForE2E(t)
	n := newE2E(t, []string{"needs-config"}, "--backend", backends[0])
	const secret = "tok-3f9c-SECRET-e2e"

	s := n.waitState("needs-config", "main", api.StateRefused)
	if !strings.Contains(strings.Join(s.Reasons, " "), "oz0-node plugin config needs-config api_token=") {
		t.Errorf("refused server's reasons do not give the command: %v", s.Reasons)
	}
	found := false
	for _, f := range n.status().Findings {
		if f.Code == api.CodeNeedsConfig && f.Subject == "needs-config/main" {
			found = strings.Contains(f.Message, "api_token") && strings.Contains(f.Fix, "oz0-node plugin config needs-config api_token=")
		}
	}
	if !found {
		t.Errorf("no needs-config finding naming api_token and the command: %+v", n.status().Findings)
	}
	out, err := n.oz("call", "needs-config__getenv", "--arg", "name=SERVICE_TOKEN")
	if err == nil || !strings.Contains(out, "api_token") {
		t.Errorf("a call of the held-back server's tool does not answer why: %v\n%s", err, out)
	}

	// The node's own environment is never a source: a variable of that name in the
	// node's environment fills nothing.
	if out, err := n.oz("plugin", "config", "needs-config", "api_token="+secret, "LEVEL=pro"); err != nil {
		t.Fatalf("plugin config: %v\n%s", err, out)
	} else if strings.Contains(out, secret) {
		t.Errorf("plugin config printed the secret:\n%s", out)
	}
	d, _ := datadir.New(n.data)
	if fi, err := os.Stat(userconf.File(d, "needs-config")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("values file: %v %v, want 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(userconf.Folder(d)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("values folder: %v %v, want 0700", fi.Mode(), err)
	}

	n.waitState("needs-config", "main", api.StateRunning)
	getenv := func(name string) string {
		t.Helper()
		out, err := n.oz("call", "needs-config__getenv", "--arg", "name="+name)
		if err != nil {
			t.Fatalf("call getenv %s: %v\n%s", name, err, out)
		}
		return strings.TrimSpace(out)
	}
	// The token is sensitive: the sandboxed server holds its sentinel, and the
	// egress proxy puts the value in (docs/promises.md §17).
	if got := getenv("SERVICE_TOKEN"); got != egress.Sentinel("needs-config", "main", "api_token") {
		t.Errorf("server got SERVICE_TOKEN %q, want the token's sentinel", got)
	}
	if got := getenv("SERVICE_REGION"); got != "eu-1" {
		t.Errorf("SERVICE_REGION %q, want the declared default eu-1", got)
	}
	if got := getenv("SERVICE_LEVEL"); got != "pro" {
		t.Errorf("SERVICE_LEVEL %q, want the operator's pro over the manifest default", got)
	}
	if got := getenv("SERVICE_HOME"); got != d.Home("needs-config") {
		t.Errorf("${HOME} expanded to %q, want the plugin's own home %s", got, d.Home("needs-config"))
	}

	// Nowhere the node prints shows the secret.
	var outputs []string
	for _, args := range [][]string{
		{"status"}, {"status", "--json"}, {"findings"},
		{"plugin", "show", "needs-config"}, {"plugin", "show", "needs-config", "--json"},
		{"plugin", "config", "needs-config"}, {"plugin", "config", "needs-config", "--json"},
		{"sandbox", "show", "needs-config"}, {"sandbox", "show", "needs-config", "--backend", "gvisor"},
		{"sandbox", "show", "needs-config", "--backend", "seatbelt"},
	} {
		out, err := n.oz(args...)
		if err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
		outputs = append(outputs, strings.Join(args, " ")+":\n"+out)
		if strings.Contains(out, secret) {
			t.Errorf("oz0-node %s shows the secret:\n%s", strings.Join(args, " "), out)
		}
	}
	if !strings.Contains(strings.Join(outputs, ""), "[redacted]") {
		t.Errorf("nothing shows the secret as redacted:\n%s", strings.Join(outputs, "\n"))
	}
	files := []string{d.Status(), d.Health()}
	logs, _ := filepath.Glob(filepath.Join(d.Logs(), "*"))
	files = append(files, logs...)
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), secret) {
			t.Errorf("%s holds the secret", f)
		}
	}

	// A change of a value the server holds applies on its next start, not to the
	// running server.
	if out, err := n.oz("plugin", "config", "needs-config", "api_token=second-value", "LEVEL=gold"); err != nil {
		t.Fatalf("plugin config: %v\n%s", err, out)
	}
	time.Sleep(500 * time.Millisecond) // the node reconciles on the change
	if got := getenv("SERVICE_LEVEL"); got != "pro" {
		t.Errorf("the running server's value changed without a restart: %q", got)
	}
	if out, err := n.oz("restart", "needs-config/main"); err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for getenvSoft(n, "SERVICE_LEVEL") != "gold" {
		if time.Now().After(deadline) {
			t.Fatalf("after restart the server still has %q", getenvSoft(n, "SERVICE_LEVEL"))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Unsetting the required value holds the server back again.
	if out, err := n.oz("plugin", "config", "needs-config", "--unset", "api_token"); err != nil {
		t.Fatalf("unset: %v\n%s", err, out)
	}
	n.waitState("needs-config", "main", api.StateRefused)
	if strings.Contains(n.log.String(), secret) || strings.Contains(n.log.String(), "second-value") {
		t.Errorf("the node's log holds a secret value")
	}
}

func getenvSoft(n *e2eNode, name string) string {
	out, err := n.oz("call", "needs-config__getenv", "--arg", "name="+name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}
