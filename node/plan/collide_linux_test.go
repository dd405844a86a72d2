package plan

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox/probe"
)

// probeTwin hashes to the uid of the backend probe's sandbox (found by search).
const probeTwin = "probe-twin-dqv4ur"

// sysTool runs a user-database tool, or skips naming what was not tested.
func sysTool(t *testing.T, argv ...string) {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func installBare(t *testing.T, d datadir.Dir, name string) {
	t.Helper()
	const commit = "0123456789abcdef0123456789abcdef01234567"
	dir := d.PluginCommit(name, commit)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(fmt.Sprintf(`{"name": %q, "version": "1.0.0"}`, name)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// A plugin's uid (and gid) is never one the system already gives: not an account
// of the password database, not a group of the group database, not the sandbox
// probe's. Each is a collision: the plugin is refused with a uid-collision finding
// naming who has the id, and the refusal follows the databases as they stand.
func TestPluginUIDNeverAnExistingAccountGroupOrTheProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: per-plugin users exist only on root nodes; uid collisions with accounts are not tested here")
	}
	for _, tool := range []string{"useradd", "userdel", "groupadd", "groupdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: collisions with system accounts are not tested here", tool)
		}
	}
	if policy.PluginUID(probeTwin) != policy.PluginUID(policy.ProbeUser) {
		t.Fatalf("%s no longer hashes to the probe's uid", probeTwin)
	}
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"acct-twin", "group-twin", probeTwin, "bystander"} {
		installBare(t, d, name)
	}
	suffix := strconv.Itoa(os.Getpid())
	acct, group := "oz0t-a"+suffix, "oz0t-g"+suffix
	acctID := strconv.FormatUint(uint64(policy.PluginUID("acct-twin")), 10)
	groupID := strconv.FormatUint(uint64(policy.PluginUID("group-twin")), 10)
	sysTool(t, "groupadd", "-g", groupID, group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	sysTool(t, "useradd", "-u", acctID, "-g", groupID, "-M", "-N", "-s", "/usr/sbin/nologin", acct)
	userGone := false
	t.Cleanup(func() {
		if !userGone {
			exec.Command("userdel", acct).Run()
		}
	})

	plan := func() map[string]string {
		n := New(d, config.Run{DataDir: d.Root, Mode: policy.Strict, Backend: policy.BackendBwrap}, probe.Assume("linux", policy.BackendBwrap, false), nil)
		all, errs := installed.List(d)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		ps, findings := n.Plan(all)
		refused := map[string]string{}
		for _, p := range ps {
			refused[p.Installed.Name] = p.Decision.Refused
		}
		for _, f := range findings {
			if f.Code == api.CodeUIDCollision && refused[f.Subject] == "" {
				t.Errorf("uid-collision finding for %s, which is not refused", f.Subject)
			}
		}
		for name, why := range refused {
			if why != "" {
				has := false
				for _, f := range findings {
					has = has || f.Code == api.CodeUIDCollision && f.Subject == name
				}
				if !has {
					t.Errorf("%s is refused (%s) without a uid-collision finding", name, why)
				}
			}
		}
		return refused
	}
	got := plan()
	for name, want := range map[string]string{
		"acct-twin":  "already used by account " + acct,
		"group-twin": "already used by group " + group,
		probeTwin:    "already used by the node's sandbox probe",
		"bystander":  "",
	} {
		if want == "" && got[name] != "" || !strings.Contains(got[name], want) {
			t.Errorf("%s: refused %q, want %q", name, got[name], want)
		}
	}
	// The databases as they stand: with the account gone, its uid is free.
	sysTool(t, "userdel", acct)
	userGone = true
	if got := plan(); got["acct-twin"] != "" {
		t.Errorf("acct-twin still refused after the account was removed: %s", got["acct-twin"])
	}
}
