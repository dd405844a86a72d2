package backendlinux

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The gate's shell reads the tool's environment as export statements: whatever a
// value holds (quotes, $(…), backticks, newlines, a would-be closing quote followed
// by a command) arrives verbatim and runs nothing. Checked with the real /bin/sh.
func TestEnvScriptValuesArriveVerbatimAndRunNothing(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	env := []string{
		"A=plain",
		"B=it's $(touch " + marker + ") `touch " + marker + "` ${HOME} \\ \"q\"",
		"C=line one\nline two'; touch " + marker + "; echo '",
		"D=",
		"E=über ✓ \t tab",
		"LD_PRELOAD=/nonexistent/preload.so",
	}
	script, err := envScript(env)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.Write(script); w.Close() }()
	cmd := exec.Command("/bin/sh", "-c", `. /dev/fd/3 || exit 125; exec 3<&-; exec env -0`)
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{r}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the gate's shell failed on the script: %v\n%s", err, script)
	}
	var got []string
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if !strings.HasPrefix(kv, "PWD=") {
			got = append(got, kv)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(env))
	if !slices.Equal(got, want) {
		t.Errorf("environment after the gate:\n got %q\nwant %q", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a value ran a command in the gate")
	}
	for _, bad := range []string{"1X=v", "A-B=v", "=v", "NOEQUALS", "A B=v", "X=a\x00b"} {
		if _, err := envScript([]string{bad}); err == nil {
			t.Errorf("envScript accepted %q", bad)
		}
	}
}
