package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LookPath resolves a command against the PATH of the tool's environment (not the
// node's), so an unsandboxed tool finds what a sandboxed one would.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := MinimalPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q: %w", name, errors.New("not found in the tool's PATH ("+path+")"))
}

// ProgramPath is the PATH a tool of a plugin on goos runs with: the manifest's
// own PATH when its env sets one, else the node's minimal one (ToolEnv).
func ProgramPath(goos string, env map[string]string) string {
	if p, ok := env["PATH"]; ok && p != "" {
		return p
	}
	if goos == "darwin" {
		return DarwinPath
	}
	return MinimalPath
}

// FindProgram says whether a tool's program (a bare name, as a manifest writes
// `bun` or `python3`) is on the PATH it runs with on this node, and that PATH.
// A path (anything with a slash) is the plugin's or the operator's own file and
// is not judged here: ok is true.
func FindProgram(goos, program string, env map[string]string) (path string, ok bool) {
	path = ProgramPath(goos, env)
	if program == "" || strings.Contains(program, "/") {
		return path, true
	}
	_, err := LookPath(program, []string{"PATH=" + path})
	return path, err == nil
}
