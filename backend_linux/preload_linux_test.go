package backendlinux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// preloadSource is a preload that, as soon as the dynamic loader maps it, notes
// where it runs (its command line, its RLIMIT_NOFILE, its pids cgroup as it sees
// it) and forks two children that note themselves and then linger, as an attacker
// would to leave something behind before the sandbox's limits hold.
const preloadSource = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void slurp(const char *path, char *buf, size_t size) {
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
	if (fd >= 0) close(fd);
	if (n < 0) n = 0;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 0 || buf[i] == '\n') buf[i] = ' ';
	buf[n] = 0;
}

static void note(const char *who) {
	char cmd[2048], cg[2048], line[4500];
	struct rlimit nofile;
	slurp("/proc/self/cmdline", cmd, sizeof cmd);
	slurp("/proc/self/cgroup", cg, sizeof cg);
	getrlimit(RLIMIT_NOFILE, &nofile);
	int n = snprintf(line, sizeof line, "%s\tnofile=%llu/%llu\tcgroup=%s\tcmd=%s\n", who,
		(unsigned long long)nofile.rlim_cur, (unsigned long long)nofile.rlim_max, cg, cmd);
	int fd = open(OZ0_OUT, O_WRONLY | O_APPEND | O_CREAT, 0600);
	if (fd >= 0) { write(fd, line, n); close(fd); }
}

__attribute__((constructor)) static void at_load(void) {
	note("load");
	for (int i = 0; i < 2; i++) {
		if (fork() == 0) {
			note("child");
			sleep(30);
			_exit(0);
		}
	}
}
`

// buildPreload compiles preloadSource into a shared object that notes into out.
func buildPreload(t *testing.T, out string) []byte {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc): the LD_PRELOAD-in-the-gate attack is not tested here")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "preload.c")
	if err := os.WriteFile(src, []byte(preloadSource), 0o600); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "preload.so")
	cmd := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", so, src, "-DOZ0_OUT="+strconv.Quote(out))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the preload: %v\n%s", err, b)
	}
	b, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A manifest's LD_PRELOAD runs its code only in the tool, once the sandbox's cgroup
// and rlimits hold: never in the gate that waits for them (bwrap) or in a runner.
// Whatever the preload forks at load is inside the limits too.
func TestSandboxPreloadRunsOnlyOnceLimitsHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b sandbox.Backend) {
		n := newTestNode(t, b, "demo")
		// A limit no process has by default, so a process that escaped it shows.
		const nofile = 777
		n.node.Limits.OpenFiles = nofile
		notes := filepath.Join(n.dir.Home("preload"), "preload.notes")
		so := buildPreload(t, notes)
		n.installPlugin("preload", map[string]string{
			"plugin.json": `{"name": "preload", "version": "1.0.0", "extensions": {"ai.oz0": {"namespace": "dev.oz0-tests"}}}`,
			".mcp.json": `{"mcpServers": {"main": {"command": "/bin/sh", "args": ["-c", "true"],
				"env": {"LD_PRELOAD": "${CLAUDE_PLUGIN_ROOT}/preload.so"}}}}`,
			"preload.so": string(so),
		})
		s := n.spec("preload", "/bin/sh", "-c", "echo ready; exec sleep 30")
		soPath := filepath.Join(s.PluginDir, "preload.so") // where the plugin sees its folder
		if !strings.Contains(strings.Join(s.Env, "\n"), "LD_PRELOAD="+soPath) {
			t.Fatalf("the spec lacks the manifest's LD_PRELOAD: %q", s.Env)
		}
		st := n.start(s)

		// The tool is /bin/sh, then sleep: each loads the preload, which forks two.
		var lines []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			b, _ := os.ReadFile(notes)
			lines = strings.Split(strings.TrimSpace(string(b)), "\n")
			if strings.Count(string(b), "cmd=sleep 30") >= 3 || time.Now().After(deadline) {
				break
			}
		}
		var inTool, children int
		for _, l := range lines {
			f := strings.Split(l, "\t")
			if len(f) != 4 {
				t.Errorf("unreadable note %q", l)
				continue
			}
			who, lim, cg, cmd := f[0], f[1], f[2], strings.TrimPrefix(f[3], "cmd=")
			if strings.Contains(cmd, gateArgv0) || strings.Contains(cmd, "read -r _") {
				t.Errorf("the preload ran in the gate, before the limits hold: %q", l)
			}
			if strings.Contains(cmd, "bwrap") || strings.Contains(cmd, "runsc") || strings.Contains(cmd, "oz0:"+landlockHelper) {
				t.Errorf("the preload ran in a runner: %q", l)
			}
			if lim != fmt.Sprintf("nofile=%d/%d", nofile, nofile) {
				t.Errorf("the preload ran (%s) before RLIMIT_NOFILE held: %s, want %d: %q", who, lim, nofile, l)
			}
			// bwrap's sandbox has a cgroup namespace rooted at the node's group: a
			// process not yet in the plugin's group sees "/".
			if b.Name() == policy.BackendBwrap && strings.Contains(cg+" ", ":pids:/ ") {
				t.Errorf("the preload ran (%s) outside the plugin's cgroup: %q", who, l)
			}
			if who == "load" && strings.HasPrefix(cmd, "sleep 30") {
				inTool++
			}
			if who == "child" {
				children++
			}
		}
		if inTool == 0 || children == 0 {
			t.Fatalf("the preload did not run in the tool (%d loads in sleep, %d children): the test proves nothing\n%s",
				inTool, children, strings.Join(lines, "\n"))
		}
		t.Logf("%d notes, %d loads in the tool, %d children", len(lines), inTool, children)

		if b.Name() == policy.BackendGVisor {
			return // gVisor's processes are the sentry's, not the host's
		}
		if b.Name() == policy.BackendLandlock {
			landlockEverythingLimited(t, st.p.Cmd.Process.Pid, s, nofile)
			return
		}
		// From the host: every process in the sandbox's PID namespace, the lingering
		// children included, is in the plugin's cgroups with its rlimits.
		var initNS string
		for pid := range hostProcs(st.p.Cmd.Process.Pid) {
			if pid == st.p.Cmd.Process.Pid {
				continue
			}
			ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
			self, _ := os.Readlink("/proc/self/ns/pid")
			if err == nil && ns != self {
				initNS = ns
				break
			}
		}
		if initNS == "" {
			t.Fatal("found no process in the sandbox's PID namespace")
		}
		ents, _ := os.ReadDir("/proc")
		inside := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || ns != initNS {
				continue
			}
			inside++
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			v1 := strings.Contains(string(cg), ":pids:")
			for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				parts := strings.SplitN(l, ":", 3)
				if len(parts) != 3 || !(parts[1] == "pids" || parts[1] == "memory" || !v1 && parts[1] == "") {
					continue
				}
				if !strings.Contains(parts[2], "oz0-"+cgroupName(s)) {
					t.Errorf("pid %d is outside the plugin's %q cgroup: %s", pid, parts[1], l)
				}
			}
			limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			for _, l := range strings.Split(string(limits), "\n") {
				if strings.HasPrefix(l, "Max open files") {
					if f := strings.Fields(l); len(f) < 5 || f[3] != strconv.Itoa(nofile) || f[4] != strconv.Itoa(nofile) {
						t.Errorf("pid %d escaped RLIMIT_NOFILE: %q", pid, l)
					}
				}
			}
		}
		if inside < 5 {
			t.Errorf("only %d processes in the sandbox; want init, the tool and its preload's children", inside)
		}
	})
}

// landlockEverythingLimited checks from the host that every process below a
// Landlock sandbox's runner (the preload's lingering children included) has its
// RLIMIT_NOFILE and, where the node makes cgroups, is in the plugin's cgroups.
func landlockEverythingLimited(t *testing.T, runner int, s *sandbox.Spec, nofile int) {
	t.Helper()
	below := 0
	for pid := range hostProcs(runner) {
		if pid == runner {
			continue
		}
		below++
		if os.Geteuid() == 0 {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				parts := strings.SplitN(l, ":", 3)
				if len(parts) == 3 && (parts[1] == "pids" || parts[1] == "memory") && !strings.Contains(parts[2], "oz0-"+cgroupName(s)) {
					t.Errorf("pid %d is outside the plugin's %q cgroup: %s", pid, parts[1], l)
				}
			}
		}
		limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
		for _, l := range strings.Split(string(limits), "\n") {
			if strings.HasPrefix(l, "Max open files") {
				if f := strings.Fields(l); len(f) < 5 || f[3] != strconv.Itoa(nofile) || f[4] != strconv.Itoa(nofile) {
					t.Errorf("pid %d escaped RLIMIT_NOFILE: %q", pid, l)
				}
			}
		}
	}
	if below < 3 {
		t.Errorf("only %d processes below the runner; want the tool and its preload's children", below)
	}
	if os.Geteuid() != 0 {
		landlockGap(t, "no-cgroup")
	}
}
