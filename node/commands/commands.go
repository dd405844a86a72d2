// Package commands reads a plugin's Claude Code slash commands (commands/*.md:
// optional front matter, then the prompt's body with $ARGUMENTS, $1…$9) so the
// gateway can offer them to any MCP client as prompts. Reading them runs nothing
// the plugin wrote: it is text, read beneath the plugin's folder.
package commands

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// Command is one slash command.
type Command struct {
	Name         string // the file name without .md
	Description  string
	ArgumentHint string
	Body         string
}

// Limits on what a plugin's commands may make the node read.
const (
	MaxCommands = 200
	MaxFileSize = 256 << 10
)

var nameRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Parse reads one command file. Front matter, when present, is a block between
// "---" lines of "key: value" pairs; description and argument-hint are kept,
// other keys (allowed-tools, model…) concern the agent and are ignored.
func Parse(name string, b []byte) (Command, error) {
	if !nameRE.MatchString(name) {
		return Command{}, fmt.Errorf("command %q: name must be letters, digits, '_' or '-'", name)
	}
	c := Command{Name: name}
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	if rest, ok := strings.CutPrefix(text, "---\n"); ok {
		front, body, found := strings.Cut(rest, "\n---")
		if !found {
			return Command{}, fmt.Errorf("command %s: front matter has no closing ---", name)
		}
		_, body, _ = strings.Cut(body, "\n") // the rest of the closing line
		for _, line := range strings.Split(front, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = unquote(strings.TrimSpace(v))
			switch strings.TrimSpace(k) {
			case "description":
				c.Description = v
			case "argument-hint":
				c.ArgumentHint = v
			}
		}
		text = body
	}
	c.Body = strings.TrimSpace(text)
	if c.Body == "" {
		return Command{}, fmt.Errorf("command %s: empty body", name)
	}
	if c.Description == "" {
		// As Claude Code does: the first line of the body describes the command.
		first, _, _ := strings.Cut(c.Body, "\n")
		c.Description = strings.TrimSpace(strings.TrimLeft(first, "# "))
	}
	return c, nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		if u, err := strconv.Unquote(`"` + v[1:len(v)-1] + `"`); err == nil {
			return u
		}
		return v[1 : len(v)-1]
	}
	return v
}

var positionalRE = lazyre.New(`\$([1-9])`)

// Render is the prompt text for the given arguments: $ARGUMENTS is all of them,
// $1…$9 each whitespace-separated one ("" when missing).
func (c Command) Render(args string) string {
	args = strings.TrimSpace(args)
	fields := strings.Fields(args)
	out := strings.ReplaceAll(c.Body, "$ARGUMENTS", args)
	return positionalRE.ReplaceAllStringFunc(out, func(m string) string {
		i := int(m[1] - '1')
		if i < len(fields) {
			return fields[i]
		}
		return ""
	})
}

// Load reads commands/*.md beneath a plugin's folder; no path leaves it (links
// that point out are not followed). A file that does not parse is reported and
// skipped.
func Load(pluginDir string) ([]Command, []error) {
	root, err := os.OpenRoot(pluginDir)
	if err != nil {
		return nil, []error{fmt.Errorf("commands: %w", err)}
	}
	defer root.Close()
	fsys := root.FS()
	ents, err := fs.ReadDir(fsys, "commands")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("commands: %w", err)}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	var out []Command
	var errs []error
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			continue
		}
		if len(out) == MaxCommands {
			errs = append(errs, fmt.Errorf("commands: more than %d; the rest are not offered", MaxCommands))
			break
		}
		p := path.Join("commands", e.Name())
		f, err := fsys.Open(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(io.LimitReader(f, MaxFileSize+1))
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if buf.Len() > MaxFileSize {
			errs = append(errs, fmt.Errorf("%s: larger than %d bytes", p, MaxFileSize))
			continue
		}
		c, err := Parse(strings.TrimSuffix(e.Name(), ".md"), buf.Bytes())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		out = append(out, c)
	}
	return out, errs
}
