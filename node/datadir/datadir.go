// Package datadir owns the node's data folder: where each file lives, the modes it
// must have, the node key, and atomic writes (temp, fsync, rename) for everything
// that matters.
package datadir

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"crypto/x509"
)

// EnvVar overrides the default data folder.
const EnvVar = "OZ0_DATA_DIR"

// LinuxSystem is a root node's default data folder on Linux.
const LinuxSystem = "/var/lib/oz0-node"

// Default returns the default data folder for this OS and user (docs/architecture.md).
func Default() string {
	if v := os.Getenv(EnvVar); v != "" {
		return v
	}
	return DefaultFor(runtime.GOOS, os.Geteuid() == 0, os.Getenv("HOME"), os.Getenv("XDG_DATA_HOME"))
}

// DefaultFor is the default data folder on goos for a root or non-root user with
// that home and XDG_DATA_HOME (for a service installed for another OS or user).
func DefaultFor(goos string, root bool, home, xdg string) string {
	switch {
	case goos == "darwin" && root:
		return "/Library/Application Support/oz0-node"
	case goos == "darwin":
		return filepath.Join(home, "Library", "Application Support", "oz0-node")
	case root:
		return LinuxSystem
	case filepath.IsAbs(xdg): // the XDG spec says to ignore relative values
		return filepath.Join(xdg, "oz0-node")
	}
	return filepath.Join(home, ".local", "share", "oz0-node")
}

// Dir is a data folder. Its methods name the files in it.
type Dir struct {
	Root string
}

// New validates a data folder path (absolute, clean, no control characters).
func New(root string) (Dir, error) {
	if root == "" {
		return Dir{}, errors.New("data folder: empty path")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return Dir{}, fmt.Errorf("data folder %q: %w", root, err)
	}
	if strings.ContainsAny(abs, "\x00\n\r") {
		return Dir{}, fmt.Errorf("data folder %q: path contains a control character", root)
	}
	return Dir{Root: filepath.Clean(abs)}, nil
}

func (d Dir) path(p ...string) string { return filepath.Join(append([]string{d.Root}, p...)...) }

func (d Dir) Key() string        { return d.path("node.key") }
func (d Dir) TenantDir() string  { return d.path("tenant") }
func (d Dir) TenantList() string { return d.path("tenant", "egress") }

// ToolRules is the tenant's per-tool rules (node/toolrule), private to the node.
func (d Dir) ToolRules() string { return d.path("tenant", "tools") }
func (d Dir) Plugins() string   { return d.path("plugins") }
func (d Dir) Homes() string     { return d.path("homes") }
func (d Dir) Run() string       { return d.path("run") }
func (d Dir) Logs() string      { return d.path("logs") }
func (d Dir) Staging() string   { return d.path("staging") }
func (d Dir) Ledger() string    { return d.path("ledger.jsonl") }
func (d Dir) Status() string    { return d.path("status.json") }
func (d Dir) Health() string    { return d.path("health.json") }
func (d Dir) Audit() string     { return d.path("logs", "audit.jsonl") }
func (d Dir) Control() string   { return d.path("run", "control.sock") }
func (d Dir) MCP() string       { return d.path("run", "mcp.sock") }

// MCPStdio is the node's MCP endpoint in the stdio framing (newline-delimited
// JSON-RPC, one session per connection), which `oz0-node mcp` relays as bytes.
func (d Dir) MCPStdio() string { return d.path("run", "mcp-stdio.sock") }

func (d Dir) Runtimes() string   { return d.path("runtimes.json") }
func (d Dir) ProbeCache() string { return d.path("probe.json") }
func (d Dir) Token() string      { return d.path("mcp.token") }

// MetricsToken is the bearer token a scraper of --metrics-listen presents.
func (d Dir) MetricsToken() string { return d.path("metrics.token") }

// LastToolsDir holds each plugin's last known tool lists.
func (d Dir) LastToolsDir() string { return d.path("tools") }

// LastTools is the last tool list each server of a plugin offered, kept across
// restarts of the node so a call of a tool of a server that is not running can
// say why instead of "unknown tool".
func (d Dir) LastTools(name string) string { return d.path("tools", name+".json") }

// Plugin is the folder of a plugin's installed commits.
func (d Dir) Plugin(name string) string { return d.path("plugins", name) }

// PluginCommit is the installed files of one commit.
func (d Dir) PluginCommit(name, commit string) string { return d.path("plugins", name, commit) }

// Current is the symlink naming the active commit.
func (d Dir) Current(name string) string { return d.path("plugins", name, "current") }

// Home is a plugin's persistent home (PLUGIN_DATA).
func (d Dir) Home(name string) string { return d.path("homes", name) }

// Views holds the plugins' writable views of their installed commits.
func (d Dir) Views() string { return d.path("views") }

// View is the writable view of a plugin's installed commit that its sandboxes see
// at the commit's own path: a copy made at the first start of that commit,
// dropped when the plugin is updated or removed.
func (d Dir) View(name, commit string) string { return d.path("views", name, commit) }

// HookView is the view of a plugin's hook runs that receive the agent's data, kept
// apart from the view its servers share, as its home is (HookHome).
func (d Dir) HookView(name, commit string) string {
	return d.path("views", name+HookHomeSuffix, commit)
}

// HookHomeSuffix names, after a plugin's name, the home of its hook runs that
// receive the agent's data (no plugin name holds a dot).
const HookHomeSuffix = ".hooks"

// HookHome is the persistent home a plugin's hook runs get when they receive the
// agent's data and have no network (docs/promises.md §16): kept apart from the
// plugin's home, which its servers and its other hook runs share and from which
// they reach the network, so nothing carries the agent's data to them.
func (d Dir) HookHome(name string) string { return d.path("homes", name+HookHomeSuffix) }

// EgressSocketDir holds one plugin's own proxy socket (bound into its hooks'
// sandboxes) and, below it, its servers' folders.
func (d Dir) EgressSocketDir(name string) string { return d.path("run", "egress", name) }

// EgressServerSocketDir holds the proxy socket of one server of a plugin, bound
// into that server's sandboxes only: where a connection arrives says which server
// speaks. Server names are free text, so the folder is named by a short hash of it
// (a unix socket's path is limited to 107 bytes).
func (d Dir) EgressServerSocketDir(name, server string) string {
	sum := sha256.Sum256([]byte(server))
	return d.path("run", "egress", name, hex.EncodeToString(sum[:4]))
}

// EgressCA is the node's egress CA, key and certificate (0600): the proxy signs
// with it the certificates of the hosts secrets are bound to. It never enters a
// sandbox (docs/promises.md §17).
func (d Dir) EgressCA() string { return d.path("egress-ca.pem") }

// EgressCABundle is the CA bundle sandboxes of plugins with secrets trust: the
// host's roots and the egress CA's certificate, no key (0644).
func (d Dir) EgressCABundle() string { return d.path("run", "egress-ca-bundle.pem") }

// Modes of the layout. On root nodes the data folder is 0711 so plugin users can
// traverse to their own folders without listing anything.
const (
	ModeRootNode = 0o711
	ModeUserNode = 0o700
	ModePrivate  = 0o700
	ModeKey      = 0o600
)

// Create makes the layout with its modes and the node key if missing. It fixes the
// modes of folders it owns; it changes nothing above Root.
func (d Dir) Create(rootNode bool) error {
	top := os.FileMode(ModeUserNode)
	if rootNode {
		top = ModeRootNode
	}
	if err := os.MkdirAll(d.Root, top); err != nil {
		return fmt.Errorf("create data folder %s: %w", d.Root, err)
	}
	if err := os.Chmod(d.Root, top); err != nil {
		return fmt.Errorf("chmod data folder %s: %w", d.Root, err)
	}
	// plugins/, homes/ and run/egress/ are traversable (0711) on root nodes: plugin
	// users need the search bit to reach their own folder, never a listing.
	sub := []struct {
		p    string
		mode os.FileMode
	}{
		{d.Plugins(), top}, {d.Homes(), top}, {d.Views(), top}, {d.Run(), top}, {d.path("run", "egress"), top},
		{d.TenantDir(), top}, {d.Logs(), ModePrivate}, {d.Staging(), ModePrivate},
	}
	for _, s := range sub {
		if err := os.MkdirAll(s.p, s.mode); err != nil {
			return fmt.Errorf("create %s: %w", s.p, err)
		}
		if err := os.Chmod(s.p, s.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", s.p, err)
		}
	}
	if _, err := d.EnsureKey(); err != nil {
		return err
	}
	return nil
}

// EnsureKey returns the node's ed25519 key, creating it (0600) when missing.
func (d Dir) EnsureKey() (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(d.Key())
	if err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("node key %s: not PEM", d.Key())
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("node key %s: %w", d.Key(), err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("node key %s: not an ed25519 key", d.Key())
		}
		if err := os.Chmod(d.Key(), ModeKey); err != nil {
			return nil, fmt.Errorf("node key %s: %w", d.Key(), err)
		}
		return ek, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read node key %s: %w", d.Key(), err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate node key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode node key: %w", err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := WriteFileAtomic(d.Key(), out, ModeKey); err != nil {
		return nil, fmt.Errorf("write node key: %w", err)
	}
	return priv, nil
}

// TraversableByOthers reports whether users other than the owner can reach path:
// every folder above it needs the search bit for others. When not, it names the
// first folder that blocks (e.g. /root at 0700), which turns plugin users off.
func TraversableByOthers(path string) (bool, string) {
	p := filepath.Clean(path)
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return true, ""
		}
		fi, err := os.Stat(parent)
		if err != nil {
			return false, parent
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return false, parent
		}
		p = parent
	}
}

// AgentSettings lists the agent settings `oz0-node setup` wrote, which plugin
// install, update and remove keep in step with the installed plugins' hooks.
func (d Dir) AgentSettings() string { return d.path("agent-settings.json") }
