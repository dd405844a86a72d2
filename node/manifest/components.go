package manifest

import (
	"fmt"
	"io/fs"
	"strings"
)

// notRunKinds are the manifest keys of parts that serve the agent itself (its
// prompts, subagents, skills, editor integrations…) and that the node, which runs
// MCP servers and hooks, recognises and does not run; with their default places.
var notRunKinds = []struct {
	key      string
	defaults []string
}{
	{"commands", []string{"commands"}},
	{"agents", []string{"agents"}},
	{"skills", []string{"skills"}},
	{"outputStyles", []string{"output-styles"}},
	{"lspServers", []string{".lsp.json"}},
	{"monitors", []string{"monitors/monitors.json"}},
	{"themes", []string{"themes"}},
	{"channels", nil},
}

// topLevelKeys are the manifest fields the node knows; another one is a warning.
var topLevelKeys = []string{"$schema", "name", "displayName", "version", "description", "author",
	"homepage", "repository", "license", "keywords", "category", "tags",
	"mcpServers", "hooks", "userConfig", "extensions", "dependencies",
	"commands", "agents", "skills", "outputStyles", "lspServers", "monitors", "themes", "channels"}

// notRun lists the parts the node does not run: named in the manifest, or found
// in their default place (Claude Code loads those without a manifest entry).
func (l *loader) notRun(top map[string]any) {
	for _, k := range notRunKinds {
		if v, ok := top[k.key]; ok {
			switch v.(type) {
			case string, []any, map[string]any:
				l.m.NotRun = append(l.m.NotRun, Component{Kind: k.key, Source: l.m.File + ": " + k.key})
			default:
				l.c.add(l.m.File, k.key, "must be a path, a list or an object")
			}
			continue
		}
		for _, d := range k.defaults {
			fi, err := fs.Stat(l.fsys, d)
			if err != nil {
				continue
			}
			src := d
			if fi.IsDir() {
				src += "/"
			}
			l.m.NotRun = append(l.m.NotRun, Component{Kind: k.key, Source: src})
		}
	}
	for k := range top {
		known := false
		for _, t := range topLevelKeys {
			known = known || k == t
		}
		if !known {
			l.notice(l.m.File, k, "unknown manifest field; ignored")
		}
	}
}

// NotRunSummary words the parts the node does not run ("skills, commands"), or "".
func (m *Manifest) NotRunSummary() string {
	var kinds []string
	for _, c := range m.NotRun {
		if !strings.Contains(","+strings.Join(kinds, ",")+",", ","+c.Kind+",") {
			kinds = append(kinds, c.Kind)
		}
	}
	return strings.Join(kinds, ", ")
}

func (l *loader) notice(file, field, format string, args ...any) {
	l.m.Notices = append(l.m.Notices, Diagnostic{Severity: SevWarning, File: file, Field: field, Message: fmt.Sprintf(format, args...)})
}
