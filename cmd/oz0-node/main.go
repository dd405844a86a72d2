// Command oz0-node is the per-machine node of the oz0 agent platform: it installs
// plugins, runs their MCP servers and hooks in sandboxes of their own, routes tool
// calls to them and reports what runs, how it is isolated and what is wrong.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"oz0.ai/node/node/reexec"
	"oz0.ai/node/node/termtext"
)

// Exit codes: 0 ok, 1 failure, 2 usage.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	reexec.Init()
	os.Exit(execute(os.Args[1:]))
}

func execute(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "oz0-node:", termtext.Clean(ee.msg))
		}
		return ee.code
	}
	// Errors quote manifests, git and builds: plugin text, never raw on a terminal.
	fmt.Fprintln(os.Stderr, "oz0-node:", termtext.Clean(err.Error()))
	var ue *usageError
	// cobra reports an unknown (sub)command as a plain error: it is a usage error too.
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") {
		return exitUsage
	}
	return exitFailure
}

// usageError marks an error in how a command was called (exit 2).
type usageError struct{ err error }

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitError carries an exit code chosen by the command (e.g. a tool's own exit code
// for `exec`, or 1 for lint errors already printed).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }
