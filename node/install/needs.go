package install

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/sandbox"
)

// The plugin's own builds (its package.json, its Python project) are for what
// runs here: a local server or a hook. A repository whose servers are all remote
// often carries a package.json for its tooling; building it would fetch
// packages nothing starts and fail the install on one that cannot be fetched.
// needs tells, from the manifest alone, which builds something that runs may
// use; where it cannot tell (a script of the plugin's, a program it does not
// know) it builds both, as before.

// needs are the builds the plugin's local servers and hooks may use.
type needs struct {
	node, python bool
	// runs says what runs, for the note of a skipped build.
	runs string
}

var (
	nodeCommands   = []string{"node", "nodejs", "npm", "npx", "pnpm", "yarn", "tsx", "ts-node", "bun", "bunx", "deno"}
	nodeExts       = []string{".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"}
	pythonCommands = []string{"python", "python3", "pip", "pip3", "uv", "uvx", "pipx", "poetry", "pdm", "hatch"}
	// otherCommands are programs that use neither build of the plugin.
	otherCommands = []string{"docker", "podman", "php", "ruby", "java", "go", "dotnet", "echo", "printf", "cat", "true", "jq", "exit"}
)

// wordKind classifies the program of a command line: a runtime by its name or
// a script by its extension, "other" for a known program that uses neither
// build, "" for anything else (a file of the plugin's, whose interpreter cannot
// be told, or a program the node does not know).
func wordKind(w string) string {
	w = strings.Trim(w, `"'`)
	base := path.Base(w)
	if i := strings.LastIndex(base, "}"); i >= 0 {
		base = base[i+1:]
	}
	isPath := strings.Contains(w, "/")
	switch {
	case slices.Contains(nodeCommands, base) || isPath && slices.Contains(nodeExts, path.Ext(base)):
		return "node"
	case slices.Contains(pythonCommands, base) || strings.HasPrefix(base, "python3.") || isPath && path.Ext(base) == ".py":
		return "python"
	case slices.Contains(otherCommands, base):
		return "other"
	}
	return ""
}

// commandUses says what a command line may use, by its program: a runtime or a
// script of one (node, python); unknown for a program the node does not know or
// a file of the plugin's whose interpreter it cannot tell, which may run
// anything; neither for a known program that uses neither build.
func commandUses(words []string) (node, python, unknown bool) {
	if len(words) == 0 {
		return false, false, false
	}
	switch wordKind(words[0]) {
	case "node":
		return true, false, false
	case "python":
		return false, true, false
	case "other":
		return false, false, false
	}
	return false, false, true
}

// shellWords splits a hook's shell command into words at blanks and shell
// operators; the first word of each pipeline or list counts as a program.
func shellWords(cmd string) [][]string {
	var out [][]string
	for _, part := range strings.FieldsFunc(cmd, func(r rune) bool { return strings.ContainsRune("|;&()\n`", r) }) {
		if ws := strings.Fields(part); len(ws) > 0 {
			// Assignments before the program (VAR=x prog) are not the program.
			for len(ws) > 1 && strings.Contains(ws[0], "=") && !strings.Contains(ws[0], "/") {
				ws = ws[1:]
			}
			out = append(out, ws)
		}
	}
	return out
}

// buildNeeds says which builds the plugin's local servers (other than those
// started through a launcher, whose packages are resolved apart) and hooks
// may use.
func buildNeeds(m *manifest.Manifest, launched func(server string) bool) needs {
	var n needs
	var what []string
	add := func(node, python, unknown bool) {
		n.node = n.node || node || unknown
		n.python = n.python || python || unknown
	}
	for _, s := range m.Servers {
		switch {
		case s.IsRemote():
			what = append(what, "server "+s.DisplayName()+" (remote)")
		case launched(s.Name):
			what = append(what, "server "+s.DisplayName()+" ("+s.Command+" package, resolved apart)")
		default:
			what = append(what, "server "+s.DisplayName()+" ("+path.Base(s.Command)+")")
			add(commandUses(append([]string{s.Command}, s.Args...)))
		}
	}
	for _, h := range m.Hooks {
		if h.Args != nil {
			add(commandUses(append([]string{h.Command}, h.Args...)))
			continue
		}
		for _, ws := range shellWords(h.Command) {
			add(commandUses(ws))
		}
	}
	if len(m.Hooks) > 0 {
		what = append(what, fmt.Sprintf("%d hook(s)", len(m.Hooks)))
	}
	if len(what) == 0 {
		what = []string{"no server or hook"}
	}
	n.runs = strings.Join(what, ", ")
	return n
}

// runtimeNames are programs a hook is started with that are runtimes: a hook
// whose shell command starts one the node lacks is noted at install (its other
// first words may be shell builtins, which no PATH holds).
var runtimeNames = []string{"bun", "bunx", "deno", "node", "npx", "python3", "python", "uv", "uvx", "php", "docker", "podman", "ruby", "java"}

// missingRuntimes notes each local server and hook of m whose program is on no
// folder of the PATH it runs with on this node (a bun server where bun is not
// installed): the server is held back at every decision until it is installed
// (finding runtime-missing), with no reinstall. launched tells the servers
// started through a launcher (they run a managed runtime).
func missingRuntimes(m *manifest.Manifest, goos string, launched func(server string) bool) []string {
	var out []string
	for _, s := range m.Servers {
		if s.IsRemote() || launched(s.Name) || strings.Contains(s.Command, "${") {
			continue
		}
		if p, ok := sandbox.FindProgram(goos, s.Command, s.Env); !ok {
			out = append(out, fmt.Sprintf("server %s starts %s, which is not installed on this node (looked on PATH %s): it does not start until it is (finding runtime-missing); installing it later needs no reinstall", s.DisplayName(), s.Command, p))
		}
	}
	seen := map[string]bool{}
	for _, h := range m.Hooks {
		prog := h.Command
		if h.Args == nil {
			ws := shellWords(h.Command)
			if len(ws) == 0 {
				continue
			}
			prog = ws[0][0]
		}
		if !slices.Contains(runtimeNames, prog) || seen[prog] {
			continue
		}
		if p, ok := sandbox.FindProgram(goos, prog, nil); !ok {
			seen[prog] = true
			out = append(out, fmt.Sprintf("a %s hook starts %s, which is not installed on this node (looked on PATH %s): the hook fails until it is", h.Event, prog, p))
		}
	}
	return out
}
