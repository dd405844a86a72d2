package installed

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The managed runtimes are found at fixed system paths (never a PATH shim in a
// private home), recorded once in runtimes.json, and read from there afterwards.
func TestRuntimesRecordedOnce(t *testing.T) {
	d := newData(t)
	if err := d.Create(false); err != nil {
		t.Fatal(err)
	}
	paths, err := Runtimes(d)
	if err != nil {
		t.Fatal(err)
	}
	var rec RuntimeSet
	if err := json.Unmarshal([]byte(readFile(t, d.Runtimes())), &rec); err != nil {
		t.Fatalf("runtimes.json: %v", err)
	}
	if rec.Python == nil && rec.Node == nil {
		t.Skip("no Python or Node.js at the system paths: runtime detection not tested")
	}
	for _, p := range paths {
		if strings.HasPrefix(p, "/root") || strings.HasPrefix(p, os.Getenv("HOME")+"/") {
			t.Errorf("runtime path %s lies in a home plugin users cannot read", p)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("runtime path %s: %v", p, err)
		}
	}
	if rec.Python != nil {
		if !contains(paths, rec.Python.Path) || len(rec.Python.Dirs) == 0 || !strings.HasPrefix(rec.Python.Version, "3.") {
			t.Errorf("python runtime %+v, paths %v", rec.Python, paths)
		}
	}

	// An operator's edit of runtimes.json is what counts from then on.
	rec.Node = &Runtime{Name: "node", Command: "/opt/node/bin/node", Path: "/opt/node/bin/node"}
	b, _ := json.Marshal(rec)
	os.WriteFile(d.Runtimes(), b, 0o644)
	paths, err = Runtimes(d)
	if err != nil || !contains(paths, "/opt/node/bin/node") {
		t.Fatalf("edited runtimes.json not read: %v %v", paths, err)
	}
}

// On macOS a real Python is preferred to /usr/bin/python3, which is a shim.
func TestPythonCandidatesPreferARealPythonOnMac(t *testing.T) {
	c := candidatesFor("python", "darwin")
	if len(c) == 0 || c[0] != "/opt/homebrew/bin/python3" || c[len(c)-1] != "/usr/bin/python3" {
		t.Errorf("darwin candidates %q: want Homebrew's first and the /usr/bin shim last", c)
	}
}
