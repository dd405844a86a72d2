package installed

import (
	"fmt"
	"path"
	"strings"
)

// SitePackages is where a plugin's Python dependencies are installed, relative to
// its folder; the node puts it on PYTHONPATH.
const SitePackages = ".oz0/site-packages"

// LaunchDir holds the packages of servers started through a launcher (npx, bunx,
// uvx, pipx run), one folder per server, relative to the plugin's folder.
const LaunchDir = ".oz0/launch"

// Launch is a server's launcher resolved at install: the package it would have
// fetched at every start, installed once under the build rules and pinned. The
// server then starts Entry with its runtime and the arguments after the package.
type Launch struct {
	Server   string `json:"server"`
	Launcher string `json:"launcher"` // npx, bunx, uvx or pipx
	// Asked is the package as the manifest named it (name and version, range, tag
	// or nothing); Package and Version are what install resolved.
	Asked     string `json:"asked"`
	Package   string `json:"package"`
	Version   string `json:"version"`
	Integrity string `json:"integrity,omitempty"`
	Runtime   string `json:"runtime"` // node, bun or python
	// Entry is, for npm packages, the bin script relative to the plugin's folder;
	// for Python, the console script's "module:attribute".
	Entry string `json:"entry"`
	// Command is the bin or console script's name.
	Command string `json:"command"`
	// Skip is how many of the manifest's args the launcher consumed (its options
	// and the package); the server gets the rest.
	Skip int `json:"skip"`
	// Python is the interpreter the launcher line asked for (uvx --python), which
	// install found the managed one to satisfy.
	Python string `json:"python,omitempty"`
	// EnvFiles are the indexes in the manifest's args of the launcher's --env-file
	// values: the start loads those files, as uvx would, inside the sandbox.
	EnvFiles []int `json:"env_files,omitempty"`
}

// String is the resolution as the operator reads it.
func (l Launch) String() string {
	s := fmt.Sprintf("server %s: %s %s resolved to %s@%s", l.Server, l.Launcher, l.Asked, l.Package, l.Version)
	if l.Integrity != "" {
		s += " (" + l.Integrity + ")"
	}
	return s + ", runs " + l.Command + " with " + l.Runtime
}

// Argv is the command line a launcher server starts with: its runtime (from rs,
// the node's managed runtimes) running the installed entry point of the plugin at
// dir, then the manifest's arguments after the package (args, expanded).
func (l Launch) Argv(dir string, rs *RuntimeSet, args []string) ([]string, error) {
	rest := []string{}
	if l.Skip <= len(args) {
		rest = args[l.Skip:]
	}
	var rt *Runtime
	switch l.Runtime {
	case "node":
		rt = rs.Node
	case "bun":
		rt = rs.Bun
	case "python":
		rt = rs.Python
	}
	if rt == nil {
		return nil, fmt.Errorf("server %s runs %s with the %s runtime, and the node has no managed %s runtime now", l.Server, l.Package, l.Runtime, l.Runtime)
	}
	if l.Runtime == "python" {
		mod, attr, _ := strings.Cut(l.Entry, ":")
		boot := fmt.Sprintf("import sys, importlib\nsys.path.insert(0, %q)\nsys.argv[0] = %q\n%sf = importlib.import_module(%q)\nfor a in %q.split('.'):\n    f = getattr(f, a)\nsys.exit(f())",
			path.Join(dir, SitePackages), l.Command, l.envFilesBoot(args), mod, attr)
		return append([]string{rt.Command, "-c", boot}, rest...), nil
	}
	return append([]string{rt.Command, path.Join(dir, l.Entry)}, rest...), nil
}

// envFilesBoot is the part of a Python launcher's bootstrap that loads its
// --env-file files (args are the manifest's, expanded), as uvx does: a missing
// file stops the start; each line is NAME=VALUE (an `export ` before it, quotes
// around the value and `#` comments allowed); a variable the server's
// environment already has keeps its value. It runs in the sandbox, as the
// server, so the node reads nothing of the plugin's.
func (l Launch) envFilesBoot(args []string) string {
	var files []string
	for _, i := range l.EnvFiles {
		if i >= 0 && i < len(args) {
			files = append(files, fmt.Sprintf("%q", strings.TrimPrefix(args[i], "--env-file=")))
		}
	}
	if len(files) == 0 {
		return ""
	}
	return "import os\n" +
		"for p in [" + strings.Join(files, ", ") + "]:\n" +
		"    try:\n" +
		"        f = open(p, encoding='utf-8')\n" +
		"    except OSError as e:\n" +
		"        sys.stderr.write('%s --env-file: no environment file at %s (%s)\\n' % (" + fmt.Sprintf("%q", l.Launcher) + ", p, e.strerror))\n" +
		"        sys.exit(2)\n" +
		"    with f:\n" +
		"        for line in f:\n" +
		"            line = line.strip()\n" +
		"            if line.startswith('export '):\n" +
		"                line = line[7:].lstrip()\n" +
		"            k, sep, v = line.partition('=')\n" +
		"            k, v = k.strip(), v.strip()\n" +
		"            if not sep or not k or k.startswith('#'):\n" +
		"                continue\n" +
		"            if len(v) >= 2 and v[0] == v[-1] and v[0] in '\"\\'':\n" +
		"                v = v[1:-1]\n" +
		"            elif ' #' in v:\n" +
		"                v = v.split(' #', 1)[0].rstrip()\n" +
		"            os.environ.setdefault(k, v)\n"
}
