// Package agentsetup writes the node into Claude Code's settings: the MCP entry
// (`oz0-node mcp --agent-hooks`) and one hook entry per event (`oz0-node hook`),
// merged into what is there, idempotent and reversible. Merging is pure (JSON text
// in, JSON text out, everything else kept in its order); Apply reads and writes
// the files, with a backup.
package agentsetup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/tidwall/gjson"

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
	Scope    string `json:"scope"`
	Settings string `json:"settings"` // holds "hooks"
	MCP      string `json:"mcp"`      // holds "mcpServers"
}

// mcpMode is the mode of an MCP file setup creates: ~/.claude.json holds Claude
// Code's own state and is private; a project's .mcp.json is shared with the
// project's repository.
func (f Files) mcpMode() os.FileMode {
	if f.Scope == ScopeProject {
		return 0o644
	}
	return 0o600
}

// FilesFor names the files of a scope: user scope ~/.claude/settings.json and
// ~/.claude.json; project scope .claude/settings.json and .mcp.json at the
// project root.
func FilesFor(scope, home, project string) (Files, error) {
	switch scope {
	case ScopeUser:
		return Files{Scope: scope, Settings: filepath.Join(home, ".claude", "settings.json"), MCP: filepath.Join(home, ".claude.json")}, nil
	case ScopeProject:
		return Files{Scope: scope, Settings: filepath.Join(project, ".claude", "settings.json"), MCP: filepath.Join(project, ".mcp.json")}, nil
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

// hookGroup is one matcher group of an event as Claude Code's settings hold it.
type hookGroup struct {
	Matcher string      `json:"matcher,omitempty"`
	Hooks   []hookEntry `json:"hooks"`
}

// group is the node's entry for a registration.
func (n Node) group(r Registration) []byte {
	b, _ := jsonMarshal(hookGroup{Matcher: r.Matcher, Hooks: []hookEntry{{Type: "command", Command: n.HookCommand(), Timeout: HookTimeout}}})
	return b
}

func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
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

func object(doc []byte, name string) ([]byte, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return []byte("{}\n"), nil
	}
	if !gjson.ValidBytes(doc) || !gjson.ParseBytes(doc).IsObject() {
		return nil, fmt.Errorf("%s: not a JSON object; fix or move it, then run setup again", name)
	}
	return doc, nil
}

// MergeSettings puts the node's hook entries into a settings.json: one group per
// registration (Registrations), and none for any other event (or none at all
// with remove), keeping every other hook and setting byte for byte. It returns
// the new text and what changed; no change returns doc itself.
func MergeSettings(doc []byte, n Node, regs []Registration, remove bool) ([]byte, []string, error) {
	doc, err := object(doc, "settings")
	if err != nil {
		return nil, nil, err
	}
	if h := lookup(doc, "hooks"); h.ok && !h.IsObject() {
		return nil, nil, errors.New("settings: \"hooks\" is not an object")
	}
	want := map[string]Registration{}
	if !remove {
		for _, r := range regs {
			want[r.Event] = r
		}
	}
	var added, updated, removed []string
	out := doc
	for _, ev := range manifest.HookEvents {
		cur := lookup(out, "hooks", ev)
		if cur.ok && !cur.IsArray() {
			return nil, nil, fmt.Errorf("settings: %q is not an array", "hooks."+ev)
		}
		// Ours: groups that hold only the node's entry; a group of the user's
		// may hold it too (the user moved it there).
		type held struct {
			group int
			hooks []int // ours among the group's hooks
			all   bool
		}
		var ours []held
		for i, g := range elements(cur) {
			_, hs := member(g, "hooks")
			var mine []int
			els := elements(hs)
			for j, h := range els {
				if h.Get("type").String() == "command" && n.isOurHook(h.Get("command").String()) {
					mine = append(mine, j)
				}
			}
			if len(mine) > 0 {
				ours = append(ours, held{i, mine, len(mine) == len(els)})
			}
		}
		r, wanted := want[ev]
		label := ev
		if r.Matcher != "" {
			label += " (" + r.Matcher + ")"
		}
		if wanted && len(ours) == 1 && ours[0].all {
			g := elements(cur)[ours[0].group]
			if sameJSON(g.Raw, string(n.group(r))) {
				continue
			}
			out = replace(out, g, n.group(r))
			updated = append(updated, label)
			continue
		}
		if len(ours) == 0 && !wanted {
			continue
		}
		for k := len(ours) - 1; k >= 0; k-- {
			o := ours[k]
			arr := lookup(out, "hooks", ev)
			if o.all {
				out = removeEntry(out, arr, o.group)
				continue
			}
			for j := len(o.hooks) - 1; j >= 0; j-- {
				_, hs := member(elements(lookup(out, "hooks", ev))[o.group], "hooks")
				out = removeEntry(out, hs, o.hooks[j])
			}
		}
		if arr := lookup(out, "hooks", ev); arr.ok && len(elements(arr)) == 0 {
			out = deleteMember(out, "hooks", ev)
		}
		switch {
		case wanted && len(ours) > 0:
			updated = append(updated, label)
		case wanted:
			added = append(added, label)
		default:
			removed = append(removed, ev)
		}
		if !wanted {
			continue
		}
		if arr := lookup(out, "hooks", ev); arr.ok {
			out = insert(out, arr, "", n.group(r))
		} else if out, err = setMember(out, []byte("["+string(n.group(r))+"]"), "hooks", ev); err != nil {
			return nil, nil, fmt.Errorf("settings: %w", err)
		}
	}
	if h := lookup(out, "hooks"); h.ok && len(removed) > 0 {
		if keys, _ := members(h); len(keys) == 0 {
			out = deleteMember(out, "hooks")
		}
	}
	var changes []string
	if len(added) > 0 {
		changes = append(changes, fmt.Sprintf("hook entry %q added for %d events: %s", n.HookCommand(), len(added), strings.Join(added, ", ")))
	}
	if len(updated) > 0 {
		changes = append(changes, fmt.Sprintf("hook entry %q updated for %d events: %s", n.HookCommand(), len(updated), strings.Join(updated, ", ")))
	}
	if len(removed) > 0 {
		changes = append(changes, fmt.Sprintf("oz0-node hook entries removed from %d events: %s", len(removed), strings.Join(removed, ", ")))
	}
	if len(changes) == 0 {
		return doc, nil, nil
	}
	return out, changes, nil
}

// MergeMCP puts the node's entry under mcpServers.oz0 (or takes it out with
// remove), keeping every other server and setting byte for byte. An oz0 entry
// that does not start oz0-node is the user's: it is left alone and reported as an
// error.
func MergeMCP(doc []byte, n Node, remove bool) ([]byte, []string, error) {
	doc, err := object(doc, "MCP settings")
	if err != nil {
		return nil, nil, err
	}
	if s := lookup(doc, "mcpServers"); s.ok && !s.IsObject() {
		return nil, nil, errors.New("MCP settings: \"mcpServers\" is not an object")
	}
	cur := lookup(doc, "mcpServers", hookrun.MCPServer)
	if cur.ok && !n.isOurMCP(cur.Result) {
		return nil, nil, fmt.Errorf("MCP settings: mcpServers.%s exists and does not start oz0-node; rename or remove it first", hookrun.MCPServer)
	}
	if remove {
		if !cur.ok {
			return doc, nil, nil
		}
		out := deleteMember(doc, "mcpServers", hookrun.MCPServer)
		if s := lookup(out, "mcpServers"); s.ok {
			if keys, _ := members(s); len(keys) == 0 {
				out = deleteMember(out, "mcpServers")
			}
		}
		return out, []string{"MCP server " + hookrun.MCPServer + " removed"}, nil
	}
	raw, _ := jsonMarshal(n.MCP())
	if cur.ok && sameJSON(cur.Raw, string(raw)) {
		return doc, nil, nil
	}
	out, err := setMember(doc, raw, "mcpServers", hookrun.MCPServer)
	if err != nil {
		return nil, nil, fmt.Errorf("MCP settings: %w", err)
	}
	e := n.MCP()
	change := fmt.Sprintf("MCP server %s added: %s", hookrun.MCPServer, shellJoin(append([]string{e.Command}, e.Args...)))
	if cur.ok {
		change = strings.Replace(change, " added", " updated", 1)
	}
	return out, []string{change}, nil
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
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

// Options say what Apply does.
type Options struct {
	// Hooks are the hook entries the settings are to hold (Registrations).
	Hooks  []Registration
	Remove bool // take out what setup wrote
	DryRun bool // say what would change, write nothing
	// SettingsOnly leaves the MCP file alone: the node keeping the hook entries
	// in step with its plugins.
	SettingsOnly bool
	// Backup copies each file it changes to FILE.oz0-backup-TIME first.
	Backup bool
	Now    time.Time
}

// Apply merges the node into the files of a scope, writing each that changes
// unless o.DryRun. A file it creates gets the scope's mode; one that exists
// keeps its own.
func Apply(f Files, n Node, o Options) ([]Change, error) {
	type job struct {
		path  string
		merge func([]byte) ([]byte, []string, error)
		mode  os.FileMode
	}
	jobs := []job{{f.MCP, func(b []byte) ([]byte, []string, error) { return MergeMCP(b, n, o.Remove) }, f.mcpMode()},
		{f.Settings, func(b []byte) ([]byte, []string, error) { return MergeSettings(b, n, o.Hooks, o.Remove) }, 0o644}}
	if o.SettingsOnly {
		jobs = jobs[1:]
	}
	var out []Change
	for _, job := range jobs {
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
		if !exists && (o.Remove || o.SettingsOnly && len(o.Hooks) == 0) {
			out = append(out, Change{File: job.path})
			continue
		}
		next, changes, err := job.merge(old)
		if err != nil {
			return out, fmt.Errorf("%s: %w", job.path, err)
		}
		c := Change{File: job.path, Changes: changes}
		if len(changes) == 0 || o.DryRun {
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
			if o.Backup {
				stamp := o.Now.UTC().Format("20060102T150405Z")
				c.Backup = job.path + ".oz0-backup-" + stamp
				for i := 2; ; i++ { // never overwrite an earlier backup
					if _, err := os.Lstat(c.Backup); errors.Is(err, os.ErrNotExist) {
						break
					}
					c.Backup = fmt.Sprintf("%s.oz0-backup-%s-%d", job.path, stamp, i)
				}
				if err := datadir.WriteFileAtomic(c.Backup, old, mode); err != nil {
					return out, fmt.Errorf("back up %s: %w", job.path, err)
				}
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
