package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
)

// builder applies the build rules (docs/promises.md §6) to a plugin's files in staging.
// Without packageCode nothing a plugin or a dependency wrote runs: Python wheels are
// unpacked here in Go and npm runs with lifecycle scripts off after every
// dependency was checked to come from the registry or from inside the plugin.
type builder struct {
	ctx         context.Context
	log         *slog.Logger
	d           datadir.Dir
	tree        string
	staging     string
	plugin      string
	commit      string
	packageCode bool
	private     bool
	// pythonIndex is the operator's package index (PEP 503), consulted for wheels
	// the plugin does not ship.
	pythonIndex string
	// box is the build sandbox npm runs in under strict (nil: none on this node).
	box *BuildSandbox
	// nodePath and npmPath are the managed Node.js and npm the npm build uses.
	nodePath, npmPath string
	steps             []string
	// reg is the npm registry builds use, found once (npmregistry.go).
	reg *npmRegistry
	// allowCIDRs are the operator's --egress-allow-cidr ranges.
	allowCIDRs []netip.Prefix
	// skipNode and skipPython skip the plugin's own npm and Python builds, which
	// nothing that runs uses (needs.go); runs says what runs, for the note.
	skipNode, skipPython bool
	runs                 string
	// bundled are the MCPB bundles the build unpacked (mcpb.go).
	bundled []installed.Bundle
	// notes say what the build skipped or found missing (installed.Meta.Notes).
	notes []string
	// workDir is the folder of the plugin a build tool runs in ("" for its root).
	workDir string
	// launch are the servers started through a launcher (npx, uvx…), pyLaunch
	// the Python packages among them; launched is what install resolved.
	launch   []pendingLaunch
	pyLaunch []requirement
	launched []installed.Launch
	// wheels are the wheels the strict Python build chose, by package name.
	wheels map[string]wheel
	// pyTarget is the Python ("3.X") markers and wheel tags are judged against;
	// targetPython fills it from the node's runtimes.
	pyTarget string
}

// launches reports whether server starts through a launcher the build resolves.
func (b *builder) launches(server string) bool {
	return slices.ContainsFunc(b.launch, func(l pendingLaunch) bool { return l.server == server })
}

// skipped notes a build that nothing that runs would use.
func (b *builder) skipped(what, runtime string) {
	n := fmt.Sprintf("%s not built: nothing that runs here uses %s (%s)", what, runtime, b.runs)
	b.notes = append(b.notes, n)
	b.log.Info("build skipped", "plugin", b.plugin, "why", n)
}

func (b *builder) step(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	b.steps = append(b.steps, s)
	b.log.Debug("build", "plugin", b.plugin, "step", s)
}

// refuse is the error for something only an exemption allows.
func (b *builder) refuse(format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if b.private {
		return fmt.Errorf("%w: %s; a private candidate never runs package code at build (install it from its repository to make it exemptable)", ErrBuildRefused, what)
	}
	return fmt.Errorf("%w: %s; under --plugin-sandbox strict that needs an operator exemption: --plugin-sandbox-exempt %s@%s", ErrBuildRefused, what, b.plugin, b.commit)
}

func (b *builder) run(m *manifest.Manifest) error {
	if m != nil {
		if err := b.planLaunchers(m); err != nil {
			return err
		}
		n := buildNeeds(m, b.launches)
		b.skipNode, b.skipPython, b.runs = !n.node, !n.python, n.runs
	}
	if err := b.python(); err != nil {
		return err
	}
	if err := b.npm(); err != nil {
		return err
	}
	return b.resolveLaunchers()
}

func (b *builder) exists(rel string) bool {
	_, err := os.Lstat(filepath.Join(b.tree, rel))
	return err == nil
}

// readPluginFile reads a small metadata file of the plugin (never through a symlink
// leaving it).
func (b *builder) readPluginFile(rel string) ([]byte, error) {
	r, err := os.OpenRoot(b.tree)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 4<<20 {
		return nil, fmt.Errorf("%s: not a regular file of at most 4 MiB", rel)
	}
	return r.ReadFile(rel)
}

// toolEnv is the environment of a build tool: nothing of the node's own.
func (b *builder) toolEnv(binDir string, extra ...string) []string {
	home := filepath.Join(b.staging, "home")
	p := "/usr/local/bin:/usr/bin:/bin"
	if binDir != "" {
		p = binDir + ":" + p
	}
	return append([]string{"PATH=" + p, "HOME=" + home, "LC_ALL=C.UTF-8", "TMPDIR=" + filepath.Join(b.staging, "tmp")}, extra...)
}

// exec runs a build tool in the plugin's staging folder and returns its error with
// the end of its output.
func (b *builder) exec(env []string, argv ...string) error {
	if err := os.MkdirAll(filepath.Join(b.staging, "tmp"), 0o700); err != nil {
		return err
	}
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir = filepath.Join(b.tree, filepath.FromSlash(b.workDir))
	c.Env = env
	dieWithUs(c)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	b.log.Debug("build command", "plugin", b.plugin, "argv", argv)
	if err := c.Run(); err != nil {
		tail := out.String()
		if len(tail) > 3000 {
			tail = "…" + tail[len(tail)-3000:]
		}
		return fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, strings.TrimSpace(tail))
	}
	return nil
}

// moveAside takes a file out of the tree while a tool runs (a project .npmrc could
// otherwise re-enable scripts or point at another registry) and returns a restore
// function.
func (b *builder) moveAside(rel string) (func() error, error) {
	p := filepath.Join(b.tree, rel)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return func() error { return nil }, nil
	}
	aside := filepath.Join(b.staging, "aside-"+strings.ReplaceAll(rel, "/", "_"))
	if err := os.Rename(p, aside); err != nil {
		return nil, fmt.Errorf("set %s aside: %w", rel, err)
	}
	return func() error { return os.Rename(aside, p) }, nil
}
