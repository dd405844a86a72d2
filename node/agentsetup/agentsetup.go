// Package agentsetup writes the node into Claude Code's settings: the MCP entry
// (`oz0-node mcp --agent-hooks`) and one hook entry per event (`oz0-node hook`),
// merged into what is there, idempotent and reversible. Merging is pure (JSON text
// in, JSON text out, everything else kept in its order); Apply reads and writes
// the files, with a backup.
package agentsetup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/pretty"
	"github.com/tidwall/sjson"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/manifest"
)

// HookTimeout is the timeout written for each hook entry, in seconds (Claude
// Code's unit): above the longest `oz0-node hook` takes, so Claude Code never
// cuts the node's answer short.
const HookTimeout = 90

// Scopes of Claude Code's settings.
const (
	ScopeUser    = "user"
	ScopeProject = "project"
)

// Files are the two files setup writes for a scope.
type Files struct {
	Settings string // holds "hooks"
	MCP      string // holds "mcpServers"
}

// FilesFor names the files of a scope: user scope ~/.claude/settings.json and
// ~/.claude.json; project scope .claude/settings.json and .mcp.json at the
// project root.
func FilesFor(scope, home, project string) (Files, error) {
	switch scope {
	case ScopeUser:
		return Files{Settings: filepath.Join(home, ".claude", "settings.json"), MCP: filepath.Join(home, ".claude.json")}, nil
	case ScopeProject:
		return Files{Settings: filepath.Join(project, ".claude", "settings.json"), MCP: filepath.Join(project, ".mcp.json")}, nil
	}
	return Files{}, fmt.Errorf("--scope %q: must be user or project", scope)
}

// Node is how Claude Code starts the node: the binary and the global flags
// (--data-dir) that come before a subcommand.
type Node struct {
	Argv []string
}

// HookCommand is the shell command of every hook entry.
func (n Node) HookCommand() string { return shellJoin(append(append([]string{}, n.Argv...), "hook")) }

// MCPEntry is the mcpServers entry.
type MCPEntry struct {
	Type    string   `json:"type"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// MCP is the node's mcpServers entry.
func (n Node) MCP() MCPEntry {
	return MCPEntry{Type: "stdio", Command: n.Argv[0], Args: append(append([]string{}, n.Argv[1:]...), "mcp", "--agent-hooks")}
}

// hookEntry is one command hook as Claude Code's settings hold it.
type hookEntry struct {
	Type    string `json:"type"`
	Command string `json:"command"`
	Timeout int    `json:"timeout"`
}

// isOurHook says whether a hook command is an `oz0-node … hook` entry setup wrote
// (with this binary, or one named oz0-node elsewhere).
func (n Node) isOurHook(cmd string) bool {
	cmd = strings.TrimSpace(cmd)
	prog := cmd
	if rest, ok := strings.CutPrefix(cmd, "'"); ok {
		prog, _, _ = strings.Cut(rest, "'")
	} else {
		prog, _, _ = strings.Cut(cmd, " ")
	}
	return (filepath.Base(prog) == "oz0-node" || prog == n.Argv[0]) && strings.HasSuffix(cmd, " hook")
}

// isOurMCP says whether an mcpServers entry starts oz0-node.
func (n Node) isOurMCP(v gjson.Result) bool {
	c := v.Get("command").String()
	return filepath.Base(c) == "oz0-node" || c == n.Argv[0]
}

// prettyOpts write JSON as Claude Code does (JSON.stringify with two spaces):
// every array and object over several lines, keys in their order.
var prettyOpts = &pretty.Options{Width: 0, Prefix: "", Indent: "  ", SortKeys: false}

func object(doc []byte, name string) ([]byte, error) {
	if len(strings.TrimSpace(string(doc))) == 0 {
		return []byte("{}"), nil
	}
	if !gjson.ValidBytes(doc) || !gjson.ParseBytes(doc).IsObject() {
		return nil, fmt.Errorf("%s: not a JSON object; fix or move it, then run setup again", name)
	}
	return doc, nil
}

// MergeSettings puts one hook entry per event into a settings.json (or takes them
// out with remove), keeping every other hook and setting. It returns the new text
// and what changed; no change returns doc itself.
func MergeSettings(doc []byte, n Node, remove bool) ([]byte, []string, error) {
	doc, err := object(doc, "settings")
	if err != nil {
		return nil, nil, err
	}
	if h := gjson.GetBytes(doc, "hooks"); h.Exists() && !h.IsObject() {
		return nil, nil, errors.New("settings: \"hooks\" is not an object")
	}
	ours, _ := json.Marshal(struct {
		Hooks []hookEntry `json:"hooks"`
	}{[]hookEntry{{Type: "command", Command: n.HookCommand(), Timeout: HookTimeout}}})
	var added, removed []string
	out := doc
	for _, ev := range manifest.HookEvents {
		path := "hooks." + ev
		cur := gjson.GetBytes(out, path)
		if cur.Exists() && !cur.IsArray() {
			return nil, nil, fmt.Errorf("settings: %q is not an array", path)
		}
		var old, kept []string
		had := false
		for _, g := range cur.Array() {
			old = append(old, g.Raw)
			var hooks []string
			mine := false
			for _, h := range g.Get("hooks").Array() {
				if h.Get("type").String() == "command" && n.isOurHook(h.Get("command").String()) {
					mine = true
					continue
				}
				hooks = append(hooks, h.Raw)
			}
			switch {
			case !mine:
				kept = append(kept, g.Raw)
			case len(hooks) > 0: // a group of the user's that also held ours
				r, _ := sjson.SetRaw(g.Raw, "hooks", "["+strings.Join(hooks, ",")+"]")
				kept = append(kept, r)
			}
			had = had || mine
		}
		next := kept
		if !remove {
			next = append(append([]string{}, kept...), string(ours))
		}
		if sameJSONList(old, next) {
			continue
		}
		switch {
		case remove:
			removed = append(removed, ev)
		case had:
			added = append(added, ev+" (updated)")
		default:
			added = append(added, ev)
		}
		if len(next) == 0 {
			out, _ = sjson.DeleteBytes(out, path)
			continue
		}
		if out, err = sjson.SetRawBytes(out, path, []byte("["+strings.Join(next, ",")+"]")); err != nil {
			return nil, nil, fmt.Errorf("settings: set %s: %w", path, err)
		}
	}
	if remove {
		if h := gjson.GetBytes(out, "hooks"); h.IsObject() && len(h.Map()) == 0 && len(removed) > 0 {
			out, _ = sjson.DeleteBytes(out, "hooks")
		}
	}
	var changes []string
	if len(added) > 0 {
		changes = append(changes, fmt.Sprintf("hook entry %q added for %d events: %s", n.HookCommand(), len(added), strings.Join(added, ", ")))
	}
	if len(removed) > 0 {
		changes = append(changes, fmt.Sprintf("oz0-node hook entries removed from %d events: %s", len(removed), strings.Join(removed, ", ")))
	}
	if len(changes) == 0 {
		return doc, nil, nil
	}
	return pretty.PrettyOptions(out, prettyOpts), changes, nil
}

// MergeMCP puts the node's entry under mcpServers.oz0 (or takes it out with
// remove), keeping every other server. An oz0 entry that does not start oz0-node
// is the user's: it is left alone and reported as an error.
func MergeMCP(doc []byte, n Node, remove bool) ([]byte, []string, error) {
	doc, err := object(doc, "MCP settings")
	if err != nil {
		return nil, nil, err
	}
	if s := gjson.GetBytes(doc, "mcpServers"); s.Exists() && !s.IsObject() {
		return nil, nil, errors.New("MCP settings: \"mcpServers\" is not an object")
	}
	path := "mcpServers." + hookrun.MCPServer
	cur := gjson.GetBytes(doc, path)
	if cur.Exists() && !n.isOurMCP(cur) {
		return nil, nil, fmt.Errorf("MCP settings: %s exists and does not start oz0-node; rename or remove it first", path)
	}
	var out []byte
	var change string
	if remove {
		if !cur.Exists() {
			return doc, nil, nil
		}
		out, _ = sjson.DeleteBytes(doc, path)
		if s := gjson.GetBytes(out, "mcpServers"); s.IsObject() && len(s.Map()) == 0 {
			out, _ = sjson.DeleteBytes(out, "mcpServers")
		}
		change = "MCP server " + hookrun.MCPServer + " removed"
	} else {
		raw, _ := json.Marshal(n.MCP())
		if cur.Exists() && sameJSON(cur.Raw, string(raw)) {
			return doc, nil, nil
		}
		if out, err = sjson.SetRawBytes(doc, path, raw); err != nil {
			return nil, nil, fmt.Errorf("MCP settings: set %s: %w", path, err)
		}
		e := n.MCP()
		change = fmt.Sprintf("MCP server %s added: %s", hookrun.MCPServer, shellJoin(append([]string{e.Command}, e.Args...)))
		if cur.Exists() {
			change = strings.Replace(change, " added", " updated", 1)
		}
	}
	return pretty.PrettyOptions(out, prettyOpts), []string{change}, nil
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

func sameJSONList(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameJSON(a[i], b[i]) {
			return false
		}
	}
	return true
}

// shellJoin quotes argv for a POSIX shell (Claude Code runs hook commands with one).
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-=:@+,", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Change is what Apply did (or would do) to one file.
type Change struct {
	File    string
	Backup  string // the copy of the file before, "" when it did not exist or nothing changed
	Changes []string
}

// Apply merges the node into both files of a scope, writing each that changes
// (after a backup of what was there) unless dryRun.
func Apply(f Files, n Node, remove, dryRun bool, now time.Time) ([]Change, error) {
	var out []Change
	for _, job := range []struct {
		path  string
		merge func([]byte, Node, bool) ([]byte, []string, error)
		mode  os.FileMode
	}{{f.MCP, MergeMCP, 0o600}, {f.Settings, MergeSettings, 0o644}} {
		// A settings file kept elsewhere through a link (a dotfiles folder) is
		// written where it lives; the link stays.
		if real, err := filepath.EvalSymlinks(job.path); err == nil {
			job.path = real
		}
		old, err := os.ReadFile(job.path)
		exists := err == nil
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return out, fmt.Errorf("read %s: %w", job.path, err)
		}
		if !exists && remove {
			out = append(out, Change{File: job.path})
			continue
		}
		next, changes, err := job.merge(old, n, remove)
		if err != nil {
			return out, fmt.Errorf("%s: %w", job.path, err)
		}
		c := Change{File: job.path, Changes: changes}
		if len(changes) == 0 || dryRun {
			out = append(out, c)
			continue
		}
		mode := job.mode
		if exists {
			fi, err := os.Stat(job.path)
			if err != nil {
				return out, fmt.Errorf("stat %s: %w", job.path, err)
			}
			mode = fi.Mode().Perm()
			c.Backup = job.path + ".oz0-backup-" + now.UTC().Format("20060102T150405Z")
			for i := 2; ; i++ { // never overwrite an earlier backup
				if _, err := os.Lstat(c.Backup); errors.Is(err, os.ErrNotExist) {
					break
				}
				c.Backup = fmt.Sprintf("%s.oz0-backup-%s-%d", job.path, now.UTC().Format("20060102T150405Z"), i)
			}
			if err := datadir.WriteFileAtomic(c.Backup, old, mode); err != nil {
				return out, fmt.Errorf("back up %s: %w", job.path, err)
			}
		} else if err := os.MkdirAll(filepath.Dir(job.path), 0o755); err != nil {
			return out, fmt.Errorf("create %s: %w", filepath.Dir(job.path), err)
		}
		if err := datadir.WriteFileAtomic(job.path, next, mode); err != nil {
			return out, fmt.Errorf("write %s: %w", job.path, err)
		}
		out = append(out, c)
	}
	return out, nil
}
