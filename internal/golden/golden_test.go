package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// failures is a test that records how it failed instead of failing.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *failures) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

// check runs Check against a recorder, as a test of its own would.
func check(t *testing.T, name, got string) []string {
	f := &failures{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Check(f, name, got)
	}()
	<-done
	return f.msgs
}

func setUpdate(t *testing.T, on bool) {
	old := flag.Lookup("update").Value.String()
	if err := flag.Set("update", fmt.Sprint(on)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flag.Set("update", old) })
}

// A golden test passes on the same bytes only: one byte, a trailing newline or a
// missing file fails it, and the failure names the file and shows the change.
func TestCheckFailsOnAnyDifference(t *testing.T) {
	t.Chdir(t.TempDir())
	setUpdate(t, false)
	os.MkdirAll("testdata", 0o755)
	os.WriteFile("testdata/x.golden", []byte("line one\nline two\n"), 0o644)
	if msgs := check(t, "x.golden", "line one\nline two\n"); len(msgs) != 0 {
		t.Errorf("the same bytes failed: %q", msgs)
	}
	for _, got := range []string{"line one\nline 2\n", "line one\nline two", "line one\nline two\n\n", ""} {
		msgs := check(t, "x.golden", got)
		if len(msgs) != 1 || !strings.Contains(msgs[0], "testdata/x.golden") || !strings.Contains(msgs[0], "-update") {
			t.Errorf("%q against the golden file: failures %q, want one naming the file and -update", got, msgs)
		}
	}
	msgs := check(t, "x.golden", "line one\nline 2\n")
	if len(msgs) != 1 || !strings.Contains(msgs[0], "-line two") || !strings.Contains(msgs[0], "+line 2") {
		t.Errorf("the failure does not show the change: %q", msgs)
	}
	if msgs := check(t, "missing.golden", "x"); len(msgs) != 1 || !strings.Contains(msgs[0], "missing") {
		t.Errorf("a missing golden file: failures %q", msgs)
	}
}

// Under -update the output is written, in folders named after subtests too, and
// the test passes.
func TestCheckUpdateWrites(t *testing.T) {
	t.Chdir(t.TempDir())
	setUpdate(t, true)
	if msgs := check(t, "TestX/80x24/plugins.golden", "screen\n"); len(msgs) != 0 {
		t.Fatalf("-update failed: %q", msgs)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "TestX", "80x24", "plugins.golden"))
	if err != nil || string(b) != "screen\n" {
		t.Errorf("-update wrote %q, %v", b, err)
	}
	setUpdate(t, false)
	if msgs := check(t, "TestX/80x24/plugins.golden", "screen\n"); len(msgs) != 0 {
		t.Errorf("after -update: %q", msgs)
	}
}
