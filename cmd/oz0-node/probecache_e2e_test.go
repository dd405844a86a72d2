package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// bwrapStarts runs `oz0-node exec` under strace and counts the bwrap processes it
// started (the probe's and the tool's).
func bwrapStarts(t *testing.T, bin, data string, args ...string) int {
	t.Helper()
	return bwrapStartsWith(t, bin, data, "", args...)
}

// bwrapStartsWith is bwrapStarts with stdin.
func bwrapStartsWith(t *testing.T, bin, data, stdin string, args ...string) int {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command("strace", append([]string{"-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o", trace,
		bin, "--data-dir", data}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oz0-node %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `execve("`+backendTool(policy.BackendBwrap)+`"`) && !strings.Contains(l, "--version") {
			n++
		}
	}
	return n
}

func cachedProbes(t *testing.T, data string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "probe.json"))
	if err != nil {
		t.Fatalf("probe cache: %v", err)
	}
	var f testCacheFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("probe cache: %v", err)
	}
	out := map[string]bool{}
	for name := range f.Works {
		out[name] = true
	}
	return out
}

// The first exec probes and leaves the verdict in the data folder; the next runs
// only the sandbox it was asked for; a changed key (here a new node binary) probes
// again.
func TestExecProbesOnceThenUsesTheCache(t *testing.T) {
	bin, data := execNode(t, "demo")
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace is not installed: the sandboxes exec starts are not counted here")
	}
	run := []string{"exec", "demo", "--backend", policy.BackendBwrap, "--", "/bin/true"}
	if _, errs, code := runOz(bin, data, nil, run...); code != 0 {
		if strings.Contains(errs, "does not work on this node") {
			t.Skipf("bwrap does not work here: %s", errs)
		}
		t.Fatalf("exec: exit %d: %s", code, errs)
	}
	if !cachedProbes(t, data)[policy.BackendBwrap] {
		t.Fatal("the first exec left no verdict for bwrap in the data folder")
	}
	if n := bwrapStarts(t, bin, data, run...); n != 1 {
		t.Errorf("a second exec --backend bwrap started %d bwrap sandboxes, want 1 (the tool's, no probe)", n)
	}
	if n := bwrapStarts(t, bin, data, "exec", "demo", "--", "/bin/true"); n != 1 {
		t.Errorf("exec under auto started %d bwrap sandboxes, want 1", n)
	}
	// Another node binary is another key: its first exec probes again.
	other := filepath.Join(filepath.Dir(bin), "oz0-node-copy")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, b, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	if n := bwrapStarts(t, other, data, run...); n != 2 {
		t.Errorf("exec by another node binary started %d bwrap sandboxes, want 2 (a probe, then the tool)", n)
	}
	if n := bwrapStarts(t, other, data, run...); n != 1 {
		t.Errorf("its second exec started %d bwrap sandboxes, want 1", n)
	}
}

// `oz0-node hook` (run by an agent on every event) uses the data folder's probe
// cache as exec does: once bwrap is known to work, a hook starts only its own
// sandbox.
func TestHookUsesTheProbeCache(t *testing.T) {
	bin, data := execNode(t, "claude-hooks")
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace is not installed: the sandboxes hook starts are not counted here")
	}
	payload := `{"session_id":"s1","transcript_path":"/tmp/t.jsonl","cwd":"/tmp","hook_event_name":"PreToolUse",` +
		`"tool_name":"mcp__oz0__claude-hooks__echo","tool_input":{"text":"forbidden words"}}`
	hook := func() string {
		cmd := exec.Command(bin, "--data-dir", data, "hook")
		cmd.Stdin = strings.NewReader(payload)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hook: %v", err)
		}
		return string(out)
	}
	if out := hook(); !strings.Contains(out, `"permissionDecision":"deny"`) {
		if _, errs, _ := runOz(bin, data, nil, "exec", "claude-hooks", "--backend", policy.BackendBwrap, "--", "/bin/true"); strings.Contains(errs, "does not work on this node") {
			t.Skipf("bwrap does not work here: %s", errs)
		}
		t.Fatalf("the guard hook did not deny: %s", out)
	}
	if !cachedProbes(t, data)[policy.BackendBwrap] {
		t.Fatal("the first hook left no verdict for bwrap in the data folder")
	}
	if n := bwrapStartsWith(t, bin, data, payload, "hook"); n != 1 {
		t.Errorf("a second hook started %d bwrap sandboxes, want 1 (the hook's, no probe)", n)
	}
}

// `--backend gvisor` probes gVisor only: bwrap is never started to decide.
func TestExecBackendGVisorProbesOnlyGVisor(t *testing.T) {
	bin, data := execNode(t, "demo")
	_, errs, code := runOz(bin, data, nil, "exec", "demo", "--backend", policy.BackendGVisor, "--", "/bin/true")
	if code != 0 && strings.Contains(errs, "does not work on this node") {
		t.Skipf("gVisor does not work here: %s", errs)
	}
	if code != 0 {
		t.Fatalf("exec --backend gvisor: exit %d: %s", code, errs)
	}
	got := cachedProbes(t, data)
	if !got[policy.BackendGVisor] || got[policy.BackendBwrap] {
		t.Errorf("after exec --backend gvisor the cache holds %v: want gvisor probed and bwrap not", got)
	}
}

// A backend named by --backend that does not work (runsc for a non-root user)
// fails with the reason, and no cache file that is not this key's says otherwise.
func TestExecBrokenBackendFailsClearly(t *testing.T) {
	bin, _ := execNode(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv is not installed: exec as a non-root user is not tested here")
	}
	if backendTool(policy.BackendGVisor) == "" {
		t.Skip("runsc is not installed: a broken gVisor is not tested here")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "oz0-probe-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, _ := datadir.New(filepath.Join(dir, "data"))
	os.Mkdir(d.Root, 0o700)
	for _, p := range []string{dir, d.Root} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	execAsNobody := func() (string, int) {
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			bin, "--data-dir", d.Root, "exec", "nosuch", "--backend", policy.BackendGVisor, "--", "/bin/true")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return string(out), code
	}
	clear := func(out string, code int) bool {
		return code != 0 && strings.Contains(out, "--backend gvisor was requested and does not work on this node") &&
			strings.Contains(out, "not root") && strings.Contains(out, "nothing is started")
	}
	if out, code := execAsNobody(); !clear(out, code) {
		t.Errorf("exec --backend gvisor as a non-root user: exit %d: %s", code, out)
	}
	// A cache claiming gVisor works, written under another kernel: not trusted.
	key := testCacheKey{Tools: map[string]testFileID{}, Kernel: testKernel(t), Node: testIdentify(bin), EUID: nobody}
	for _, b := range platformBackends() {
		key.Tools[b.Name()] = testIdentify(backendTool(b.Name()))
	}
	plant := func(k testCacheKey) {
		b, _ := json.Marshal(testCacheFile{V: 1, Key: k, Works: map[string]struct{}{policy.BackendGVisor: {}}})
		if err := os.WriteFile(d.ProbeCache(), b, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chown(d.ProbeCache(), nobody, nobody)
	}
	stale := key
	stale.Kernel += "-old"
	plant(stale)
	if out, code := execAsNobody(); !clear(out, code) {
		t.Errorf("with a stale cache claiming gvisor works: exit %d: %s", code, out)
	}
	// The control: under its exact key the same claim is taken (exec goes on to
	// look for the plugin), so the refusal above came from the key.
	plant(key)
	if out, code := execAsNobody(); code == 0 || !strings.Contains(out, "nosuch") {
		t.Errorf("with a cache under the current key: exit %d: %s (want the plugin lookup to fail)", code, out)
	}
}

// A running node leaves its probe for exec: exec next to it starts only the
// sandbox it was asked for.
func TestE2ENodeSharesItsProbeWithExec(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("exec is tested on a root Linux node (per-plugin users); not tested here")
	}
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace is not installed: the sandboxes exec starts are not counted here")
	}
	if backendTool(policy.BackendBwrap) == "" {
		t.Skip("bwrap is not installed: not tested here")
	}
	n := newE2E(t, []string{"demo"})
	n.stop()
	os.Remove(filepath.Join(n.data, "probe.json")) // what the install left: the node must write its own
	n.start()
	n.waitState("demo", "main", api.StateRunning)
	got := cachedProbes(t, n.data)
	if !got[policy.BackendBwrap] {
		t.Fatalf("the running node's probe cache holds %v, want bwrap", got)
	}
	if c := bwrapStarts(t, n.bin, n.data, "exec", "demo", "--backend", policy.BackendBwrap, "--", "/bin/true"); c != 1 {
		t.Errorf("exec beside a running node started %d bwrap sandboxes, want 1 (no probe)", c)
	}
}

// A plugin raised to gVisor, exec'd under --backend bwrap before gVisor was ever
// probed: exec probes gVisor then (it is the sandbox about to run) and runs the
// tool there, never under bwrap.
func TestExecProbesGVisorWhenThePluginNeedsIt(t *testing.T) {
	bin, data := execNode(t)
	d, _ := datadir.New(data)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	dst := d.PluginCommit("raised", commit)
	if _, err := fixtures.Extract("demo", dst); err != nil {
		t.Fatal(err)
	}
	mf := filepath.Join(dst, "plugin.json")
	b, err := os.ReadFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["name"] = "raised"
	m["extensions"] = map[string]any{"ai.oz0": map[string]any{"namespace": "dev.oz0-fixtures", "isolation": "gvisor"}}
	b, _ = json.Marshal(m)
	if err := os.WriteFile(mf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: "raised", Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if pr := newGVisorForTest().Probe(context.Background()); !pr.Works {
		t.Skipf("gVisor does not work here (%v): a raised plugin is not exec'd here", pr.Err)
	}
	out, errs, code := runOz(bin, data, nil, "exec", "raised", "--backend", policy.BackendBwrap, "--", "uname", "-r")
	if got := cachedProbes(t, data); !got[policy.BackendGVisor] {
		t.Errorf("after exec of a raised plugin the cache holds %v: gVisor was not probed", got)
	}
	host, _ := exec.Command("uname", "-r").Output()
	if code != 0 || strings.TrimSpace(out) == "" || strings.TrimSpace(out) == strings.TrimSpace(string(host)) {
		t.Errorf("exec raised --backend bwrap -- uname -r: %q (exit %d, %s): want gVisor's kernel, not the host's %q", out, code, errs, host)
	}
}

func newGVisorForTest() sandbox.Backend {
	for _, b := range platformBackends() {
		if b.Name() == policy.BackendGVisor {
			return b
		}
	}
	return sandbox.Direct{}
}

// The probe cache file as the node writes it (node/sandbox/probe), spelled out
// here so the test plants one under exactly the key a user's exec computes.
type testFileID struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	MTimeNS int64  `json:"mtime_ns"`
	Inode   uint64 `json:"inode"`
}

type testCacheKey struct {
	Tools  map[string]testFileID `json:"tools"`
	Kernel string                `json:"kernel"`
	Node   testFileID            `json:"node"`
	EUID   int                   `json:"euid"`
}

type testCacheFile struct {
	V     int                 `json:"v"`
	Key   testCacheKey        `json:"key"`
	Works map[string]struct{} `json:"works"`
}

func testIdentify(path string) testFileID {
	if path == "" {
		return testFileID{}
	}
	id := testFileID{Path: path}
	if fi, err := os.Stat(path); err == nil {
		id.Size, id.MTimeNS = fi.Size(), fi.ModTime().UnixNano()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id.Inode = uint64(st.Ino)
		}
	}
	return id
}

func testKernel(t *testing.T) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}
