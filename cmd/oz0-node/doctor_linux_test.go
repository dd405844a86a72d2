package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/internal/syncbuf"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/doctor"
)

// noUsernsCmd is bin with args to run inside a new user and mount namespace whose
// user.max_user_namespaces is 0 (see inNoUsernsNamespace).
func noUsernsCmd(bin string, args ...string) *exec.Cmd {
	script := `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, bin}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappingsEnableSetgroups: true,
	}
	return cmd
}

// inNoUsernsNamespace runs bin with args inside a new user and mount namespace
// (every uid and gid mapped, so the node's switch to a plugin user works as on the
// host) whose user.max_user_namespaces is 0: nothing in it may create a user
// namespace. The setting is per user namespace, so the machine is untouched.
func inNoUsernsNamespace(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := noUsernsCmd(bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("start %s in a new user namespace: %v", bin, err)
	}
	return out.String(), errb.String(), code
}

func findCheck(r doctor.Report, name string) (doctor.Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return doctor.Check{}, false
}

// TestDoctorExplainsNoUserNamespaces: on a machine where bwrap cannot create a user
// namespace, the doctor names the cause (user.max_user_namespaces is 0) and its
// fix, tells it from bwrap failing as root, and names the tier it leads to: tier 1
// on Landlock, with what that tier does not cover (exit 0).
func TestDoctorExplainsNoUserNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: the doctor in a namespace without user namespaces (mapping every uid needs root)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("not tested: bwrap is not installed, so there is no user-namespace failure to explain")
	}
	before, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")

	out, errOut, code := inNoUsernsNamespace(t, bin, "--data-dir", data, "doctor", "--json")
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if code != 0 || r.Tier != 1 || r.Backend != "landlock" {
		t.Errorf("doctor exited %d with tier %d on %s where only Landlock can run; want exit 0 and tier 1 on landlock:\n%s", code, r.Tier, r.Backend, out)
	}
	ns, _ := findCheck(r, "user namespaces")
	if ns.Status != doctor.Fail || !strings.Contains(ns.Detail, "user.max_user_namespaces is 0") || !strings.Contains(ns.Fix, "sysctl -w user.max_user_namespaces=") {
		t.Errorf("the user-namespace check does not name the cause and its fix: %+v", ns)
	}
	bw, _ := findCheck(r, "bwrap as plugin user")
	if bw.Status != doctor.Fail || !strings.Contains(bw.Detail, "user.max_user_namespaces is 0") || !strings.Contains(bw.Fix, "user.max_user_namespaces") {
		t.Errorf("the bwrap check does not say why bwrap fails: %+v", bw)
	}
	if c, _ := findCheck(r, "bwrap as root"); c.Status != doctor.OK {
		t.Errorf("bwrap as root needs no user namespace and should work: %+v", c)
	}
	if c, _ := findCheck(r, "landlock"); c.Status != doctor.OK || !strings.Contains(c.Detail, "Landlock ABI") {
		t.Errorf("landlock check: %+v", c)
	}
	if c, _ := findCheck(r, "tier"); c.Status != doctor.Warn || !strings.Contains(c.Detail, "tier 1 on Landlock") ||
		!strings.Contains(c.Detail, "user.max_user_namespaces is 0") || !strings.Contains(c.Detail, "no PID namespace") || !strings.Contains(c.Fix, "sysctl -w user.max_user_namespaces=") {
		t.Errorf("tier check does not name the Landlock tier, its cause, its gaps and the fix: %+v", c)
	}

	// The same in words, for the operator at a terminal.
	text, _, code := inNoUsernsNamespace(t, bin, "--data-dir", data, "doctor")
	if code != 0 || !strings.Contains(text, "FAIL user namespaces") || !strings.Contains(text, "fix: allow user namespaces: sysctl -w user.max_user_namespaces=") ||
		!strings.Contains(text, "WARN tier") || !strings.Contains(text, "tier 1 on Landlock") {
		t.Errorf("doctor (text) exited %d and said:\n%s", code, text)
	}

	if after, _ := os.ReadFile("/proc/sys/user/max_user_namespaces"); string(after) != string(before) {
		t.Errorf("the machine's user.max_user_namespaces changed from %q to %q", before, after)
	}
}

// TestDoctorOnThisMachine: where bwrap works here, the doctor says so and exits 0;
// a broken tenant list and a file squatting on the control socket are named with
// their fixes without changing the exit status (they do not stop tier 1).
func TestDoctorOnThisMachine(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("not tested: bwrap is not installed")
	}
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	for _, dir := range []string{"tenant", "run"} {
		if err := os.MkdirAll(filepath.Join(data, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(data, 0o700)
	if err := os.WriteFile(filepath.Join(data, "tenant", "egress"), []byte("api.example.com\n*.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "run", "control.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--data-dir", data, "doctor", "--json").Output()
	var r doctor.Report
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("doctor --json: %v (%v)\n%s", jerr, err, out)
	}
	if r.Tier != 1 {
		t.Skipf("not tested: no sandbox backend works here (%s)", out)
	}
	if err != nil {
		t.Errorf("doctor exited with %v at tier 1", err)
	}
	if c, _ := findCheck(r, "tenant list"); c.Status != doctor.Fail || !strings.Contains(c.Detail, "line 2") {
		t.Errorf("a broken tenant list is not named with its line: %+v", c)
	}
	var squat bool
	for _, c := range r.Checks {
		if c.Name == "socket" && c.Status == doctor.Fail && strings.Contains(c.Detail, "control.sock exists and is not a socket") {
			squat = true
		}
	}
	if !squat {
		t.Errorf("a file on the control socket's path is not reported:\n%s", out)
	}
}

// TestTier0NamesTheCause: a node that cannot use bwrap because no user namespace
// can be made says why in its log and in the finding of the tier it falls to, with
// the fix: the Landlock tier's where the kernel has Landlock (as here), tier 0's
// where it has not.
func TestTier0NamesTheCause(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: a node in a namespace without user namespaces (mapping every uid needs root)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("not tested: bwrap is not installed, so there is no user-namespace failure to name")
	}
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	var logb syncbuf.Buffer
	node := noUsernsCmd(bin, "--data-dir", data, "run", "--log-format", "json")
	node.Stdout, node.Stderr = &logb, &logb
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	t.Cleanup(func() {
		node.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			node.Process.Kill()
			<-exited
		}
	})
	var fs []api.Finding
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(bin, "--data-dir", data, "findings", "--json").Output()
		if err == nil && json.Unmarshal(out, &fs) == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the node exited: %v\n%s", err, logb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not answer:\n%s", logb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var fell *api.Finding
	for i := range fs {
		if fs[i].Code == api.CodeTier0 || fs[i].Code == api.CodeLandlockTier {
			fell = &fs[i]
		}
	}
	if fell == nil {
		t.Fatalf("no tier-0 or landlock-tier finding: %+v", fs)
	}
	if !strings.Contains(fell.Message, "bwrap: user namespaces are switched off: user.max_user_namespaces is 0") || !strings.Contains(fell.Fix, "sysctl -w user.max_user_namespaces=") {
		t.Errorf("the %s finding does not name the cause and its fix: %+v", fell.Code, fell)
	}
	if l := logb.String(); !strings.Contains(l, "user.max_user_namespaces is 0") || !strings.Contains(l, "sysctl -w user.max_user_namespaces=") {
		t.Errorf("the node's log does not say why it runs without bwrap:\n%s", l)
	}
}

// TestDoctorAsAUser: the doctor of an unprivileged node checks bwrap as that user,
// skips what only root does, and writes nothing but its report.
func TestDoctorAsAUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not tested: switching to an unprivileged user needs root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("not tested: bwrap is not installed")
	}
	bin := buildBinary(t)
	home := t.TempDir()
	os.Chmod(home, 0o755)
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--data-dir", filepath.Join(home, "data"), "doctor", "--json")
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var r doctor.Report
	if jerr := json.Unmarshal([]byte(out.String()), &r); jerr != nil {
		t.Fatalf("doctor --json as uid 65534: %v (%v)\n%s\n%s", jerr, err, out.String(), errb.String())
	}
	if errb.Len() > 0 {
		t.Errorf("the doctor wrote to stderr: %s", errb.String())
	}
	if r.Root {
		t.Error("the report says root")
	}
	bw, ok := findCheck(r, "bwrap as node user")
	if !ok {
		t.Fatalf("no check of bwrap as the node's user: %+v", r.Checks)
	}
	if (bw.Status == doctor.OK) != (r.Tier == 1) || (err == nil) != (r.Tier == 1) {
		t.Errorf("bwrap as the node's user %s, tier %d, exit %v", bw.Status, r.Tier, err)
	}
	for _, name := range []string{"bwrap as root", "runsc", "plugin users"} {
		c, _ := findCheck(r, name)
		notInstalled := name == "runsc" && strings.Contains(c.Detail, "not installed")
		if c.Status != doctor.Skip && !notInstalled {
			t.Errorf("%s on a user node: %+v", name, c)
		}
	}
}
