// Package golden is the tests' one golden-file helper: it compares a test's output
// with a file under testdata/ and, when the tests run with -update, writes the
// output there first.
package golden

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/aymanbagabas/go-udiff"
	// The -update flag is the one x/exp/golden registers, the flag teatest's
	// goldens answer to. Imported here, it exists once in every test binary that
	// uses this package (a second flag of that name would panic), registered
	// before any test reads it.
	_ "github.com/charmbracelet/x/exp/golden"
)

// Updating reports whether the tests run with -update: a test that generates a
// file other than a golden one (a Go source) writes it then.
func Updating() bool {
	f := flag.Lookup("update")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	on, _ := g.Get().(bool)
	return on
}

// Check compares got with the file testdata/name and fails the test, showing the
// difference, when they are not the same bytes. Under -update it writes got to
// the file first (creating its folders), so the test passes and git shows what
// changed.
func Check[T ~string | ~[]byte](tb testing.TB, name string, got T) {
	tb.Helper()
	file := filepath.Join("testdata", name)
	if Updating() {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			tb.Fatalf("golden file %s: %v", file, err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			tb.Fatalf("golden file %s: %v", file, err)
		}
	}
	want, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("golden file %s is missing: go test -update in the package writes it (review it before committing)", file)
	}
	if err != nil {
		tb.Fatalf("golden file %s: %v", file, err)
	}
	if string(want) != string(got) {
		tb.Errorf("output differs from the golden file %s; if the change is intended, go test -update in the package rewrites it (review the diff):\n%s",
			file, udiff.Unified(file, "got", string(want), string(got)))
	}
}
