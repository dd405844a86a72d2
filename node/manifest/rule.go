package manifest

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// Rule is a Claude Code permission rule as a hook's `if` uses it: a tool name,
// optionally with a specifier in parentheses ("Bash(git commit:*)", "Edit(*.ts)",
// "WebFetch(domain:example.com)", "mcp__github__create_issue").
//
// A rule decides whether a hook runs. Where the node cannot tell (a tool input it
// does not know, a field missing from the payload) the rule matches, so a guard
// hook runs rather than being skipped: the mistake is one extra hook run, never a
// missed check.
type Rule struct {
	Tool string
	Spec string
	// HasSpec distinguishes "Bash" (every call) from "Bash(…)".
	HasSpec bool
}

var ruleToolRE = lazyre.New(`^[A-Za-z0-9_.*-]+$`)

// MaxRuleLength bounds a rule: it is matched on every tool call, so a plugin
// must not make each call pay for a huge one.
const MaxRuleLength = 1024

// ParseRule reads one permission rule.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errors.New("empty rule")
	}
	if len(s) > MaxRuleLength {
		return Rule{}, fmt.Errorf("longer than %d characters", MaxRuleLength)
	}
	open := strings.IndexByte(s, '(')
	if open < 0 {
		if !ruleToolRE.MatchString(s) {
			return Rule{}, errors.New("not a permission rule such as Bash(git commit:*)")
		}
		return Rule{Tool: s}, nil
	}
	if !strings.HasSuffix(s, ")") {
		return Rule{}, errors.New("a specifier must end with \")\"")
	}
	r := Rule{Tool: s[:open], Spec: s[open+1 : len(s)-1], HasSpec: true}
	if !ruleToolRE.MatchString(r.Tool) {
		return Rule{}, errors.New("not a permission rule such as Bash(git commit:*)")
	}
	if strings.TrimSpace(r.Spec) == "" {
		return Rule{}, errors.New("empty specifier in parentheses")
	}
	return r, nil
}

func (r Rule) String() string {
	if !r.HasSpec {
		return r.Tool
	}
	return r.Tool + "(" + r.Spec + ")"
}

// ruleFamilies: a rule on the first name covers the tools that do the same kind
// of thing, as Claude Code's Read and Edit rules do.
var ruleFamilies = map[string][]string{
	"Edit": {"Edit", "Write", "MultiEdit", "NotebookEdit"},
	"Read": {"Read", "Grep", "Glob", "LS", "NotebookRead"},
}

// Matches reports whether a call of tool with input falls under the rule.
func (r Rule) Matches(tool string, input map[string]any) bool {
	if !r.matchesTool(tool) {
		return false
	}
	if !r.HasSpec {
		return true
	}
	switch {
	case tool == "Bash" || r.Tool == "Bash":
		cmd, ok := input["command"].(string)
		return !ok || matchBash(r.Spec, cmd)
	case r.Tool == "WebFetch":
		u, ok := input["url"].(string)
		return !ok || matchDomain(r.Spec, u)
	case r.Tool == "Task" || r.Tool == "Agent":
		a, ok := input["subagent_type"].(string)
		return !ok || globMatch(r.Spec, a, false)
	case inFamily("Edit", r.Tool) || inFamily("Read", r.Tool):
		for _, k := range []string{"file_path", "path", "notebook_path"} {
			if p, ok := input[k].(string); ok {
				return matchPath(r.Spec, p)
			}
		}
		return true
	}
	return true
}

func inFamily(fam, tool string) bool {
	for _, t := range ruleFamilies[fam] {
		if t == tool {
			return true
		}
	}
	return false
}

func (r Rule) matchesTool(tool string) bool {
	switch {
	case r.Tool == tool:
		return true
	case strings.Contains(r.Tool, "*"):
		return globMatch(r.Tool, tool, false)
	case strings.HasPrefix(r.Tool, "mcp__") && strings.Count(r.Tool, "__") == 1:
		// "mcp__server" covers every tool of that server.
		return strings.HasPrefix(tool, r.Tool+"__")
	}
	return inFamily(r.Tool, tool)
}

// matchBash matches a command line against a Bash rule's specifier. A compound
// command matches when any of its parts does, and leading VAR=value assignments
// are skipped, as Claude Code does; the split ignores quoting, which can only
// produce more parts to try (a hook runs more often, never less).
func matchBash(spec, cmd string) bool {
	parts := append([]string{cmd}, splitCommand(cmd)...)
	for _, p := range parts {
		if matchOneBash(spec, stripAssignments(strings.TrimSpace(p))) {
			return true
		}
	}
	return false
}

var assignRE = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*=\S*\s+`)

func stripAssignments(s string) string {
	for {
		loc := assignRE.FindStringIndex(s)
		if loc == nil {
			return s
		}
		s = s[loc[1]:]
	}
}

func splitCommand(cmd string) []string {
	return strings.FieldsFunc(strings.NewReplacer("&&", "\n", "||", "\n").Replace(cmd), func(r rune) bool {
		return r == '\n' || r == ';' || r == '|' || r == '&'
	})
}

func matchOneBash(spec, cmd string) bool {
	// Legacy prefix form: "git commit:*".
	if prefix, ok := strings.CutSuffix(spec, ":*"); ok {
		return strings.HasPrefix(cmd, prefix)
	}
	// "git commit *" also covers a bare "git commit".
	if prefix, ok := strings.CutSuffix(spec, " *"); ok && !strings.Contains(prefix, "*") && cmd == prefix {
		return true
	}
	if !strings.Contains(spec, "*") {
		return cmd == spec
	}
	return globMatch(spec, cmd, false)
}

// matchDomain matches "domain:example.com" against a URL's host (the host or a
// subdomain of it).
func matchDomain(spec, raw string) bool {
	d, ok := strings.CutPrefix(spec, "domain:")
	if !ok {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return true
	}
	h := strings.ToLower(u.Hostname())
	d = strings.ToLower(d)
	if strings.HasPrefix(d, "*.") {
		return strings.HasSuffix(h, d[1:])
	}
	return h == d || strings.HasSuffix(h, "."+d)
}

// matchPath matches a gitignore-style path specifier. The node does not know the
// agent's project root or home, so anchored forms ("/src/**", "~/x", "./x") are
// matched as suffixes of the path; that can only match more paths.
func matchPath(spec, p string) bool {
	switch {
	case strings.HasPrefix(spec, "//"):
		return globMatch(spec[1:], p, true) || globMatch("**/"+strings.TrimPrefix(spec, "//"), p, true)
	case strings.HasPrefix(spec, "~/"):
		spec = spec[2:]
	case strings.HasPrefix(spec, "./"):
		spec = spec[2:]
	case strings.HasPrefix(spec, "/"):
		spec = spec[1:]
	}
	spec = strings.TrimSuffix(spec, "/")
	p = path.Clean(p)
	if globMatch(spec, p, true) || globMatch("**/"+spec, p, true) {
		return true
	}
	// "dir" or "dir/**" also covers everything below dir.
	return globMatch("**/"+strings.TrimSuffix(spec, "/**")+"/**", p, true)
}

// globMatch matches s against pattern with '*' (any run; within one path
// segment when paths is set), '**' (any run across segments) and '?'.
func globMatch(pattern, s string, paths bool) bool {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			i++
			if i+1 < len(pattern) && pattern[i+1] == '/' {
				i++
				b.WriteString("(?:.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*' && paths:
			b.WriteString("[^/]*")
		case c == '*':
			b.WriteString(".*")
		case c == '?' && paths:
			b.WriteString("[^/]")
		case c == '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(s)
}
