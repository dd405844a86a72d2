package install

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/installed"
)

// npmRegistry is the package registry npm builds use: the one the operator's npm
// is configured with (`npm config get registry`: the operator's .npmrc, npm's
// global config, an npm_config_registry in the environment, else npm's own
// default), e.g. a company mirror. No registry is written into the node.
type npmRegistry struct {
	url      string // as npm names it, ending in "/"
	hostPort hostPort
	// builtin is npm's own default registry, which lockfiles name: npm fetches
	// what they name there from url instead (its replace-registry-host rule).
	builtin string
}

// registryTimeout bounds each `npm config get`.
const registryTimeout = 30 * time.Second

// registry finds, once per build, the registry the operator's npm is configured
// with and npm's own default.
func (b *builder) registry() (*npmRegistry, error) {
	if b.reg != nil {
		return b.reg, nil
	}
	ctx := b.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := findRegistry(ctx, b.d)
	if err != nil {
		return nil, err
	}
	b.reg = r
	return r, nil
}

// NPMRegistry is the registry npm builds on this node use (the one the operator's
// npm is configured with), as npm names it.
func NPMRegistry(ctx context.Context, d datadir.Dir) (string, error) {
	r, err := findRegistry(ctx, d)
	if err != nil {
		return "", err
	}
	return r.url, nil
}

// findRegistry asks the managed npm, the operator's configuration in hand, for
// the registry, and with none for its own default. It runs in a scratch folder
// of its own, far from any plugin's files (no project .npmrc applies).
func findRegistry(ctx context.Context, d datadir.Dir) (*npmRegistry, error) {
	scratch, err := os.MkdirTemp("", "oz0-npm-config-")
	if err != nil {
		return nil, fmt.Errorf("npm registry: %w", err)
	}
	defer os.RemoveAll(scratch)
	rs, err := installed.LoadRuntimes(d)
	if err != nil {
		return nil, err
	}
	if rs.Node == nil || rs.NPM == "" {
		return nil, fmt.Errorf("no managed Node.js runtime with npm was found (looked for %s)", strings.Join(installed.Candidates("node"), ", "))
	}
	path := "PATH=" + filepath.Dir(rs.Node.Path) + ":/usr/local/bin:/usr/bin:/bin"
	// The operator's configuration: their home's .npmrc, npm's global config and
	// npm_config_* of the environment the install runs in. Never the plugin's
	// .npmrc: npm runs in scratch, not in the tree.
	env := []string{path, "LC_ALL=C"}
	if h, err := os.UserHomeDir(); err == nil {
		env = append(env, "HOME="+h)
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(strings.ToLower(k), "npm_config_") {
			env = append(env, kv)
		}
	}
	configured, err := npmConfigRegistry(ctx, rs.NPM, scratch, env)
	if err != nil {
		return nil, fmt.Errorf("the registry npm is configured with: %w", err)
	}
	// npm's own default, with no configuration at all.
	bare := []string{path, "LC_ALL=C", "HOME=" + scratch, "npm_config_userconfig=" + filepath.Join(scratch, "no-user-npmrc"), "npm_config_globalconfig=" + filepath.Join(scratch, "no-global-npmrc")}
	builtin, err := npmConfigRegistry(ctx, rs.NPM, scratch, bare)
	if err != nil {
		return nil, fmt.Errorf("npm's default registry: %w", err)
	}
	u, err := url.Parse(configured)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return nil, fmt.Errorf("npm is configured with registry %q: builds need an http(s) URL without credentials in it", configured)
	}
	hp, err := urlHostPort(u)
	if err != nil {
		return nil, fmt.Errorf("npm registry %s: %w", configured, err)
	}
	return &npmRegistry{url: configured, hostPort: hp, builtin: builtin}, nil
}

// npmConfigRegistry asks npm for its registry setting under env, run in dir (so
// no project .npmrc applies).
func npmConfigRegistry(ctx context.Context, npm, dir string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	c := exec.CommandContext(ctx, npm, "config", "get", "registry")
	c.Dir, c.Env = dir, append(env, "npm_config_update_notifier=false")
	dieWithUs(c)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("npm config get registry: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	r := strings.TrimSpace(out.String())
	if r == "" || r == "undefined" {
		return "", fmt.Errorf("npm config get registry: no registry")
	}
	if !strings.HasSuffix(r, "/") {
		r += "/"
	}
	return r, nil
}

// accepts reports whether a lockfile's resolved URL comes from the registry:
// the configured one, or npm's default, which npm replaces by the configured one.
func (r *npmRegistry) accepts(resolved string) bool {
	return strings.HasPrefix(resolved, r.url) || strings.HasPrefix(resolved, r.builtin)
}
