package install

import (
	"fmt"
	"slices"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// launcherCall is what a server's command line asks a launcher for.
type launcherCall struct {
	launcher string // npx, bunx, uvx or pipx
	pkg      string // the package's name
	spec     string // npm: version, range or tag ("" = latest); Python: a requirement's specifiers
	asked    string // the package argument as written
	command  string // the bin/console script to run ("" = the package's own)
	skip     int
	// python is the interpreter a Python launcher was asked for (uvx --python);
	// envFiles are the indexes in args of its --env-file values.
	python   string
	envFiles []int
}

// commandNameRE is a bin or console script name: no path, nothing to quote.
var commandNameRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// parseLauncher recognises a stdio server's command line that starts through a
// known launcher. ok is false for any other command. An error says why a launcher
// line cannot be resolved at install (an option it does not know, a package that
// is not from a registry).
func parseLauncher(command string, args []string) (c launcherCall, ok bool, err error) {
	switch command {
	case "npx", "bunx":
		c, err = parseNPX(command, args)
	case "uvx":
		c, err = parseUVX(args)
	case "pipx":
		if len(args) == 0 || args[0] != "run" {
			return c, false, nil
		}
		c, err = parsePipxRun(args[1:])
		c.skip++
	default:
		return c, false, nil
	}
	if err != nil {
		return c, true, fmt.Errorf("%s %s: %w", command, strings.Join(args, " "), err)
	}
	c.launcher = command
	return c, true, nil
}

func parseNPX(command string, args []string) (launcherCall, error) {
	var c launcherCall
	pkg := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i++
			goto positional
		case a == "-y" || a == "--yes" || a == "-q" || a == "--quiet" || a == "--silent" || (command == "bunx" && a == "--bun"):
		case a == "-p" || a == "--package":
			if i+1 >= len(args) || pkg != "" {
				return c, fmt.Errorf("%s needs one package", a)
			}
			i++
			pkg = args[i]
		case strings.HasPrefix(a, "--package="):
			if pkg != "" {
				return c, fmt.Errorf("more than one --package")
			}
			pkg = strings.TrimPrefix(a, "--package=")
		case strings.HasPrefix(a, "-"):
			return c, fmt.Errorf("option %s is not understood at install (known: -y, --yes, -p/--package, --quiet)", a)
		default:
			goto positional
		}
	}
positional:
	if i >= len(args) {
		return c, fmt.Errorf("no package named")
	}
	if pkg != "" {
		// -p PKG CMD: the command is a bin of PKG.
		c.command = args[i]
		if !commandNameRE.MatchString(c.command) {
			return c, fmt.Errorf("command %q with --package is not a bin name", c.command)
		}
	} else {
		pkg = args[i]
	}
	c.skip = i + 1
	c.asked = pkg
	name, spec, err := splitNPMSpec(pkg)
	if err != nil {
		return c, err
	}
	c.pkg, c.spec = name, spec
	return c, nil
}

// splitNPMSpec splits NAME, NAME@VERSION, NAME@TAG or @SCOPE/NAME@RANGE and
// refuses what would not come from the registry.
func splitNPMSpec(s string) (name, spec string, err error) {
	name = s
	if at := strings.LastIndex(s, "@"); at > 0 {
		name, spec = s[:at], s[at+1:]
	}
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") || strings.Contains(s, ":") || (strings.Contains(s, "/") && !strings.HasPrefix(s, "@")) {
		return "", "", fmt.Errorf("package %q is not a package of the registry (a path, URL or git source would not follow the build rules)", s)
	}
	if !npmNameRE(name) {
		return "", "", fmt.Errorf("package %q: %q is not an npm package name", s, name)
	}
	if spec == "latest" {
		spec = ""
	}
	if p := npmSpecProblem(".", spec); p != "" {
		return "", "", fmt.Errorf("package %q is %s", s, p)
	}
	return name, spec, nil
}

// npmLegacyName accepts the names of packages already in the registry, which
// may have capitals (npmNameRE for the rest): never a path element . or .., a
// separator or a leading dot.
func npmLegacyName(n string) bool { return npmNameRE(strings.ToLower(n)) }

// npmNameRE accepts registry package names: lowercase name or @scope/name.
func npmNameRE(n string) bool {
	part := func(p string) bool {
		if p == "" || len(p) > 214 || p[0] == '.' || p[0] == '_' {
			return false
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' || r == '~') {
				return false
			}
		}
		return true
	}
	if scope, rest, ok := strings.Cut(n, "/"); ok {
		return strings.HasPrefix(scope, "@") && part(scope[1:]) && part(rest)
	}
	return part(n)
}

func parseUVX(args []string) (launcherCall, error) {
	return parsePythonLauncher(args, "--from", true, []string{"-q", "--quiet", "--offline", "--isolated"}, "--from, --python, --env-file, --quiet")
}

func parsePipxRun(args []string) (launcherCall, error) {
	return parsePythonLauncher(args, "--spec", false, []string{"-q", "--quiet", "--no-cache"}, "--spec, --python, --no-cache, --quiet")
}

// parsePythonLauncher reads uvx's and pipx run's options up to the package: from
// names the option that gives the package spec apart from the command, envFile
// whether --env-file is one (uvx's), quiet the options that change nothing at
// install, known what the error lists. --python names the interpreter, which
// install checks against the managed one; --env-file a file of variables the
// server's start loads (installed.Launch.Argv).
func parsePythonLauncher(args []string, from string, envFile bool, quiet []string, known string) (launcherCall, error) {
	var c launcherCall
	spec := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i++
			goto positional
		case slices.Contains(quiet, a):
		case a == "--python" || a == "-p":
			if i+1 >= len(args) {
				return c, fmt.Errorf("%s needs a Python version", a)
			}
			i++
			c.python = args[i]
		case strings.HasPrefix(a, "--python="):
			c.python = strings.TrimPrefix(a, "--python=")
		case envFile && a == "--env-file":
			if i+1 >= len(args) {
				return c, fmt.Errorf("--env-file needs a file")
			}
			i++
			c.envFiles = append(c.envFiles, i)
		case envFile && strings.HasPrefix(a, "--env-file="):
			c.envFiles = append(c.envFiles, i)
		case a == from:
			if i+1 >= len(args) {
				return c, fmt.Errorf("%s needs a package", from)
			}
			i++
			spec = args[i]
		case strings.HasPrefix(a, from+"="):
			spec = strings.TrimPrefix(a, from+"=")
		case strings.HasPrefix(a, "-"):
			return c, fmt.Errorf("option %s is not understood at install (known: %s)", a, known)
		default:
			goto positional
		}
	}
positional:
	if i >= len(args) {
		return c, fmt.Errorf("no package named")
	}
	c.skip = i + 1
	return pythonCall(c, spec, args[i])
}

// pythonVersionHolds reports whether a launcher's --python request (3.12,
// python3.12, cpython@3.12, >=3.11,<3.13) holds for the managed Python of version
// have ("3.11"); ok is false for a request the node cannot judge (a path, another
// implementation).
func pythonVersionHolds(req, have string) (holds, ok bool) {
	r := strings.ToLower(strings.TrimSpace(req))
	for _, p := range []string{"cpython@", "cpython-", "cpython", "python"} {
		if strings.HasPrefix(r, p) {
			r = strings.TrimPrefix(r, p)
			break
		}
	}
	if r == "" {
		return false, false
	}
	if r[0] >= '0' && r[0] <= '9' {
		want, got := releaseOf(r), releaseOf(have)
		if len(want) == 0 || strings.Trim(r, "0123456789.") != "" {
			return false, false
		}
		n := min(len(want), len(got))
		return cmpRelease(want[:n], got[:n]) == 0, true
	}
	for _, part := range strings.Split(r, ",") {
		part = strings.TrimSpace(part)
		if specRE.FindStringSubmatch(part) == nil {
			return false, false
		}
		if !versionSatisfies(have, part) {
			return false, true
		}
	}
	return true, true
}

// pythonCall fills a Python launcher's package and command: `uvx PKG[@V]` runs
// PKG's console script PKG; `uvx --from SPEC CMD` runs CMD of SPEC's package.
func pythonCall(c launcherCall, from, app string) (launcherCall, error) {
	req := from
	if req == "" {
		req = app
		// uvx accepts NAME@VERSION (and @latest) for NAME==VERSION.
		if n, v, ok := strings.Cut(app, "@"); ok {
			app, req = n, n
			if v != "latest" {
				req = n + "==" + v
			}
		} else if i := strings.IndexAny(app, "=<>!~[; "); i >= 0 {
			app = app[:i]
		}
	}
	if strings.Contains(req, "://") || strings.HasPrefix(req, ".") || strings.HasPrefix(req, "/") || strings.Contains(req, " @ ") {
		return c, fmt.Errorf("package %q is not a package of the index (a path or URL would not follow the build rules)", req)
	}
	r, err := parseRequirement(req, "the server's launcher")
	if err != nil {
		return c, err
	}
	if !commandNameRE.MatchString(app) {
		return c, fmt.Errorf("command %q is not a console script name", app)
	}
	c.asked, c.pkg, c.spec, c.command = req, r.name, strings.Join(r.specs, ","), app
	return c, nil
}
