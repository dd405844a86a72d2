// Package reexec lets the node binary run small helper steps of its own in a fresh
// process, such as the in-sandbox egress bridge. A helper is chosen by argv[0] alone,
// so nothing else on the command line or in the environment can trigger it, and test
// binaries that import a package registering helpers behave like the node binary.
//
// argv[0] selects helper NAME in exactly two spellings:
//   - "oz0:NAME", set by the node when it starts itself (exec.Cmd.Args[0]);
//   - SandboxPath(NAME) = "/run/oz0-bin/oz0:NAME", the path at which a Linux sandbox
//     binds the node binary, because bubblewrap 0.8 (and an OCI process) cannot set
//     argv[0] apart from the path it executes. /run/oz0-bin is root-owned on a host
//     and populated only inside sandboxes, so no plugin can plant that path where the
//     node runs unsandboxed.
//
// Neither form is matched by suffix or base name: a file named "oz0:NAME" elsewhere
// triggers nothing.
package reexec

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

const prefix = "oz0:"

// SandboxDir is where Linux sandboxes bind the node binary.
const SandboxDir = "/run/oz0-bin"

var (
	mu      sync.Mutex
	helpers = map[string]func(args []string) int{}
)

// Register adds a helper. Call it from an init function, then call Init.
func Register(name string, fn func(args []string) int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := helpers[name]; dup {
		panic("reexec: helper registered twice: " + name)
	}
	helpers[name] = fn
}

// Init runs the helper named by argv[0], if any, and exits with its code. It returns
// only when this process is not a helper invocation.
func Init() {
	if len(os.Args) == 0 {
		return
	}
	name, ok := helperName(os.Args[0])
	if !ok {
		return
	}
	mu.Lock()
	fn := helpers[name]
	mu.Unlock()
	if fn == nil {
		fmt.Fprintf(os.Stderr, "oz0-node: unknown helper %q\n", name)
		os.Exit(127)
	}
	os.Exit(fn(os.Args[1:]))
}

// Argv0 is the argv[0] that selects a helper.
func Argv0(name string) string { return prefix + name }

// Self is the path of the running binary, for re-executing it.
func Self() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the node binary: %w", err)
	}
	return p, nil
}

// helperName returns the helper an argv[0] selects, if any.
func helperName(argv0 string) (string, bool) {
	if n, ok := strings.CutPrefix(argv0, prefix); ok && n != "" {
		return n, true
	}
	if n, ok := strings.CutPrefix(argv0, SandboxDir+"/"+prefix); ok && n != "" && !strings.Contains(n, "/") {
		return n, true
	}
	return "", false
}

// SandboxPath is the path inside a sandbox whose use as argv[0] selects helper name.
func SandboxPath(name string) string { return SandboxDir + "/" + prefix + name }

// Registered reports whether this binary has helper name, so a backend does not
// build a command line naming a helper that is not linked in.
func Registered(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := helpers[name]
	return ok
}
