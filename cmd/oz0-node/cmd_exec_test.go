package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
)

// execNode is a data folder with fixture plugins installed by hand (no node runs),
// for `oz0-node exec` and `sandbox show`.
func execNode(t *testing.T, plugins ...string) (bin, data string) {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("exec is tested on a root Linux node (per-plugin users); not tested here")
	}
	bin = buildBinary(t)
	tmp := t.TempDir()
	failOnLeftMounts(t, tmp)
	for d := tmp; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o711) // plugin users traverse to their folders, as under /var/lib
	}
	d, err := datadir.New(filepath.Join(tmp, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(true); err != nil {
		t.Fatal(err)
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	for _, name := range plugins {
		if _, err := fixtures.Extract(name, d.PluginCommit(name, commit)); err != nil {
			t.Fatal(err)
		}
		if err := installed.Activate(d, installed.Meta{Name: name, Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return bin, d.Root
}

func runOz(bin, data string, env []string, args ...string) (string, string, int) {
	cmd := exec.Command(bin, append([]string{"--data-dir", data}, args...)...)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return out.String(), errb.String(), code
}

// minimalEnv is every variable a tool may get from the node (docs/promises.md §7), plus
// PWD, which bwrap sets to the working folder.
var minimalEnv = map[string]bool{
	"PATH": true, "LANG": true, "HOME": true, "TMPDIR": true, "PLUGIN_ROOT": true, "PLUGIN_DATA": true,
	"CLAUDE_PLUGIN_ROOT": true, "CLAUDE_PLUGIN_DATA": true, "OZ0_PLUGIN": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true,
	"http_proxy": true, "https_proxy": true, "all_proxy": true, "no_proxy": true,
	"NODE_USE_ENV_PROXY": true, "PWD": true,
}

func TestExecRunsInThePluginSandbox(t *testing.T) {
	bin, data := execNode(t, "demo")
	env := append(os.Environ(), "OZ0_EXEC_CANARY=exec-canary-value")
	for _, backend := range []string{policy.BackendBwrap, policy.BackendGVisor} {
		t.Run(backend, func(t *testing.T) {
			out, errs, code := runOz(bin, data, env, "exec", "demo", "--backend", backend, "--", "id", "-u")
			if code != 0 && strings.Contains(errs, "does not work on this node") {
				t.Skipf("%s does not work here: %s", backend, errs)
			}
			if want := strconv.FormatUint(uint64(policy.PluginUID("demo")), 10); code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("exec demo -- id -u: %q (exit %d, %s), want the plugin's uid %s", out, code, errs, want)
			}
			out, errs, code = runOz(bin, data, env, "exec", "demo", "--backend", backend, "--", "env")
			if code != 0 {
				t.Fatalf("exec -- env: exit %d: %s", code, errs)
			}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				k, _, _ := strings.Cut(l, "=")
				if !minimalEnv[k] {
					t.Errorf("exec -- env: %q is not in the minimal set", l)
				}
			}
			if strings.Contains(out, "exec-canary-value") {
				t.Errorf("the node's environment reached the tool")
			}
			if _, _, code := runOz(bin, data, env, "exec", "demo", "--backend", backend, "--", "sh", "-c", "exit 7"); code != 7 {
				t.Errorf("exec -- sh -c 'exit 7': exit %d, want the tool's 7", code)
			}
		})
	}
}

func TestExecUsageAndFailClosed(t *testing.T) {
	bin, data := execNode(t, "demo")
	if _, errs, code := runOz(bin, data, nil, "exec", "demo", "--backend", "chroot", "--", "true"); code != exitUsage {
		t.Errorf("exec --backend chroot: exit %d (%s), want %d", code, errs, exitUsage)
	}
	if _, errs, code := runOz(bin, data, nil, "exec", "demo", "true", "false"); code != exitUsage {
		t.Errorf("exec without --: exit %d (%s), want %d", code, errs, exitUsage)
	}
	if _, errs, code := runOz(bin, data, nil, "exec", "nosuch", "--", "true"); code == 0 || !strings.Contains(errs, "nosuch") {
		t.Errorf("exec of a plugin that is not installed: exit %d: %s", code, errs)
	}
	// An explicitly requested backend that does not work fails closed.
	if _, errs, code := runOz(bin, data, nil, "exec", "demo", "--backend", policy.BackendSeatbelt, "--", "true"); code == 0 || !strings.Contains(errs, "nothing is started") {
		t.Errorf("exec --backend seatbelt on Linux: exit %d: %s", code, errs)
	}
}

func TestSandboxShowPrintsWhatAStartBuilds(t *testing.T) {
	bin, data := execNode(t, "demo")
	for _, c := range []struct{ backend, want string }{
		{policy.BackendBwrap, "oz0-gate python3 "},
		{policy.BackendGVisor, `"ociVersion"`},
		{policy.BackendSeatbelt, "(deny default"},
	} {
		out, errs, code := runOz(bin, data, nil, "sandbox", "show", "demo", "--backend", c.backend)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("sandbox show --backend %s: exit %d, %s\n%s", c.backend, code, errs, out)
		}
	}
	if _, _, code := runOz(bin, data, nil, "sandbox", "show", "demo", "--backend", "none"); code != exitUsage {
		t.Errorf("sandbox show --backend none: exit %d, want %d", code, exitUsage)
	}
}

// With no node running, exec serves the plugin's egress endpoint itself: the tool
// reaches the proxy on its loopback (through the in-sandbox bridge) and the proxy
// enforces the plugin's lists (demo declares no egress, so every host is refused).
func TestExecServesTheEgressEndpoint(t *testing.T) {
	bin, data := execNode(t, "demo")
	if err := os.WriteFile(filepath.Join(data, "tenant", "egress"), []byte("example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := `import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())`
	for _, backend := range []string{policy.BackendBwrap, policy.BackendGVisor} {
		out, errs, code := runOz(bin, data, nil, "exec", "demo", "--backend", backend, "--", "python3", "-c", prog)
		if code != 0 && strings.Contains(errs, "does not work on this node") {
			t.Logf("%s does not work here: not tested on it", backend)
			continue
		}
		if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "HTTP/1.1 403") {
			t.Errorf("%s: the proxy endpoint inside exec's sandbox: exit %d, %q, %s", backend, code, out, errs)
		}
	}
}
