package installed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"oz0.ai/node/node/datadir"
)

// Runtime is one managed language runtime that plugins run with.
type Runtime struct {
	Name    string `json:"name"`    // python or node
	Command string `json:"command"` // the path tools name (e.g. /usr/bin/python3)
	Path    string `json:"path"`    // the real binary behind it
	Version string `json:"version"`
	// Dirs are the folders the runtime reads at run time (its standard library).
	Dirs []string `json:"dirs,omitempty"`
}

// RuntimeSet is runtimes.json: found once, then read. An operator may edit it to
// point at other runtimes; they must be readable by every user (plugin users run
// them).
type RuntimeSet struct {
	FoundAt time.Time `json:"found_at"`
	Python  *Runtime  `json:"python,omitempty"`
	Node    *Runtime  `json:"node,omitempty"`
	// Bun runs servers a plugin starts with bunx (optional).
	Bun *Runtime `json:"bun,omitempty"`
	// NPM is the npm the build uses (never run by plugins).
	NPM string `json:"npm,omitempty"`
}

// Paths are every file and folder plugins need read access to.
func (s *RuntimeSet) Paths() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range []*Runtime{s.Python, s.Node, s.Bun} {
		if r == nil {
			continue
		}
		for _, p := range append([]string{r.Path}, r.Dirs...) {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

var runtimesMu sync.Mutex

// Runtimes returns the paths of the managed runtimes (real binaries and library
// folders) that plugins need read access to, finding and recording them in
// <data>/runtimes.json the first time.
func Runtimes(d datadir.Dir) ([]string, error) {
	s, err := LoadRuntimes(d)
	if err != nil {
		return nil, err
	}
	return s.Paths(), nil
}

// maxRuntimesFile bounds a runtimes.json read.
const maxRuntimesFile = 1 << 20

// LoadRuntimes reads runtimes.json, or finds the runtimes and records them. The
// file is a cache: one that cannot be read or does not parse (torn, emptied, too
// large, a dangling link) is found again and rewritten, with a log line, and the
// unreadable one kept beside it (runtimes.json.unreadable) for an operator who
// edited it by hand. A failed write costs nothing but the next start's look.
func LoadRuntimes(d datadir.Dir) (*RuntimeSet, error) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	b, err := readBounded(d.Runtimes(), maxRuntimesFile)
	if err == nil {
		var s RuntimeSet
		if err = json.Unmarshal(b, &s); err == nil {
			return &s, nil
		}
		err = fmt.Errorf("does not parse: %w", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		slog.Warn("managed runtimes cache unreadable: found again and rewritten", "file", d.Runtimes(), "err", err, "kept", d.Runtimes()+".unreadable")
		os.Rename(d.Runtimes(), d.Runtimes()+".unreadable")
	}
	s := DetectRuntimes()
	if _, err := os.Stat(d.Root); err != nil {
		return s, nil // no data folder yet: recorded once it exists
	}
	out, _ := json.MarshalIndent(s, "", "  ")
	// Readable: it names no secret, and a status view may show it.
	if err := datadir.WriteFileAtomic(d.Runtimes(), append(out, '\n'), 0o644); err != nil {
		slog.Warn("managed runtimes not recorded; found again at the next start", "file", d.Runtimes(), "err", err)
	}
	return s, nil
}

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

// Candidates lists where the system's runtime name ("python", "node" or "bun")
// is looked for, preferred first.
func Candidates(name string) []string { return candidatesFor(name, runtime.GOOS) }

// candidatesFor lists where a runtime lives on goos. On macOS a real (Homebrew)
// Python comes before /usr/bin/python3, a shim that runs the developer tools'
// Python or asks to install them.
func candidatesFor(name, goos string) []string {
	darwin := goos == "darwin"
	switch {
	case name == "python" && darwin:
		return []string{"/opt/homebrew/bin/python3", "/usr/local/bin/python3", "/usr/bin/python3"}
	case name == "python":
		return []string{"/usr/bin/python3", "/usr/local/bin/python3"}
	case name == "node" && darwin:
		return []string{"/opt/homebrew/bin/node", "/usr/local/bin/node"}
	case name == "node":
		return []string{"/usr/bin/node", "/usr/local/bin/node"}
	case name == "bun" && darwin:
		return []string{"/opt/homebrew/bin/bun", "/usr/local/bin/bun"}
	case name == "bun":
		return []string{"/usr/local/bin/bun", "/usr/bin/bun"}
	}
	return nil
}

// DetectRuntimes finds the system's Python and Node.js at fixed paths — never
// through the caller's PATH, which may point into a home no plugin user can read
// (pyenv shims under /root, nvm) — and asks each for its version and library.
func DetectRuntimes() *RuntimeSet {
	s := &RuntimeSet{FoundAt: time.Now().UTC()}
	for _, c := range Candidates("python") {
		real, ok := usableBinary(c)
		if !ok {
			continue
		}
		out, err := probe(c, "-I", "-c", "import sys,sysconfig;print('%d.%d'%sys.version_info[:2]);print(sysconfig.get_paths()['stdlib']);print(sysconfig.get_paths()['platstdlib'])")
		if err != nil {
			continue
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 3 {
			continue
		}
		r := &Runtime{Name: "python", Command: c, Path: real, Version: lines[0]}
		for _, dir := range lines[1:3] {
			if rd, err := filepath.EvalSymlinks(dir); err == nil && !contains(r.Dirs, rd) {
				r.Dirs = append(r.Dirs, rd)
			}
		}
		s.Python = r
		break
	}
	for _, c := range Candidates("node") {
		real, ok := usableBinary(c)
		if !ok {
			continue
		}
		v, err := probe(c, "--version")
		if err != nil {
			continue
		}
		s.Node = &Runtime{Name: "node", Command: c, Path: real, Version: strings.TrimPrefix(v, "v")}
		npm := filepath.Join(filepath.Dir(c), "npm")
		if _, ok := usableBinary(npm); ok {
			s.NPM = npm
		}
		break
	}
	for _, c := range Candidates("bun") {
		real, ok := usableBinary(c)
		if !ok {
			continue
		}
		if v, err := probe(c, "--version"); err == nil {
			s.Bun = &Runtime{Name: "bun", Command: c, Path: real, Version: v}
			break
		}
	}
	return s
}

// usableBinary resolves a runtime path and checks that every user can run it.
func usableBinary(p string) (string, bool) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o005 != 0o005 {
		return "", false
	}
	if ok, _ := datadir.TraversableByOthers(real); !ok {
		return "", false
	}
	return real, true
}

func probe(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	c.Dir = "/"
	var out bytes.Buffer
	c.Stdout = &out
	if err := c.Run(); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
