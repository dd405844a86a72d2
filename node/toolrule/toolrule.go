// Package toolrule is the tenant's per-tool policy: the rules of <data>/tenant/tools,
// their parser and the decision they make for one tool. It is pure: the gateway
// hides and the daemon refuses by what Decide says, and the file is read by
// node/datadir (docs/operators.md, "The tenant's tool rules").
package toolrule

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxFile bounds how much of the tool rules file is read.
const MaxFile = 1 << 20

// Sep joins a plugin's name and its tool's in the names rules are written over
// (the gateway's own separator).
const Sep = "__"

// The annotations a rule may name (MCP's ToolAnnotations hints).
const (
	ReadOnly    = "readOnlyHint"
	Destructive = "destructiveHint"
	Idempotent  = "idempotentHint"
	OpenWorld   = "openWorldHint"
)

// Hints are a tool's annotations as its server gave them; nil is "not said".
type Hints struct {
	ReadOnly, Destructive, Idempotent, OpenWorld *bool
}

// Has reports whether the hint named is true for the tool, taking MCP's defaults
// where the server said nothing: a tool is not read-only, may be destructive
// (unless it is read-only), is not idempotent and reaches an open world. So
// `deny annotation:destructiveHint` also refuses a tool whose server does not
// say it is harmless.
func (h Hints) Has(name string) bool {
	is := func(p *bool, def bool) bool {
		if p == nil {
			return def
		}
		return *p
	}
	switch name {
	case ReadOnly:
		return is(h.ReadOnly, false)
	case Destructive:
		return !is(h.ReadOnly, false) && is(h.Destructive, true)
	case Idempotent:
		return is(h.Idempotent, false)
	case OpenWorld:
		return is(h.OpenWorld, true)
	}
	return false
}

// Rule is one line of the file.
type Rule struct {
	Allow bool
	// Pattern is a glob over <plugin>__<tool> ("*" matches any run of
	// characters), or "" when the rule is over an annotation.
	Pattern string
	// Annotation is the hint a rule over annotations names ("" otherwise).
	Annotation string
	Line       int
}

// String renders the rule as written, with its line: `deny *__delete (line 3)`.
func (r Rule) String() string {
	verb := "deny"
	if r.Allow {
		verb = "allow"
	}
	what := r.Pattern
	if r.Annotation != "" {
		what = "annotation:" + r.Annotation
	}
	return fmt.Sprintf("%s %s (line %d)", verb, what, r.Line)
}

// Matches reports whether the rule covers the tool name (<plugin>__<tool>) with
// those hints.
func (r Rule) Matches(name string, h Hints) bool {
	if r.Annotation != "" {
		return h.Has(r.Annotation)
	}
	return Glob(r.Pattern, name)
}

// Rules is the tenant's tool rules file as read now.
type Rules struct {
	Path  string
	Rules []Rule
	// Missing: there is no file; every tool is allowed.
	Missing bool
	// Err says why the file cannot be used: every tool is then refused.
	Err error
}

// Decision is what the rules say of one tool.
type Decision struct {
	Allow bool
	// Rule is the rule that decided, in the file's words with its line, or why
	// no rule allowed it; "" when no file or no rule had anything to say.
	Rule string
	// Unlisted: refused only because the file has allow lines and none covers
	// the tool. An allow line for it would let it through (an approval's
	// "always"); a deny line or a broken file would not.
	Unlisted bool
}

// Decide decides for one tool: a broken file refuses everything, a deny line that
// covers it refuses it, and with any allow line in the file only a tool an allow
// line covers is allowed. A file without allow lines allows what it does not
// deny.
func (rs *Rules) Decide(name string, h Hints) Decision {
	if rs == nil || rs.Missing {
		return Decision{Allow: true}
	}
	if rs.Err != nil {
		return Decision{Rule: "tool rules unusable: " + rs.Err.Error()}
	}
	anyAllow := false
	var allowed *Rule
	for i, r := range rs.Rules {
		if !r.Matches(name, h) {
			anyAllow = anyAllow || r.Allow
			continue
		}
		if !r.Allow {
			return Decision{Rule: r.String()}
		}
		anyAllow = true
		if allowed == nil {
			allowed = &rs.Rules[i]
		}
	}
	switch {
	case allowed != nil:
		return Decision{Allow: true, Rule: allowed.String()}
	case anyAllow:
		return Decision{Rule: "no allow line of " + rs.Path + " covers " + name, Unlisted: true}
	}
	return Decision{Allow: true}
}

// Glob matches name against pattern, where "*" stands for any run of characters
// (none included) and every other character for itself.
func Glob(pattern, name string) bool {
	// The classic two-pointer match with one backtrack point: linear in
	// practice, never exponential.
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// validPattern: the characters of MCP tool names and "*".
func validPattern(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '*') {
			return false
		}
	}
	return true
}

var annotations = []string{ReadOnly, Destructive, Idempotent, OpenWorld}

// ParseRule parses one rule: `allow PATTERN`, `deny PATTERN`, `allow
// annotation:HINT` or `deny annotation:HINT`.
func ParseRule(line string) (Rule, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return Rule{}, errors.New(`a rule is "allow PATTERN" or "deny PATTERN" (PATTERN: <plugin>__<tool> with * globs, or annotation:HINT)`)
	}
	var r Rule
	switch f[0] {
	case "allow":
		r.Allow = true
	case "deny":
	default:
		return Rule{}, fmt.Errorf("%q: a rule starts with allow or deny", f[0])
	}
	if hint, ok := strings.CutPrefix(f[1], "annotation:"); ok {
		for _, a := range annotations {
			if a == hint {
				r.Annotation = a
				return r, nil
			}
		}
		return Rule{}, fmt.Errorf("annotation %q: must be one of %s", hint, strings.Join(annotations, ", "))
	}
	if !validPattern(f[1]) {
		return Rule{}, fmt.Errorf("pattern %q: must be a tool name <plugin>__<tool> of letters, digits, _ . - and * globs", f[1])
	}
	if !strings.Contains(f[1], "*") && !strings.Contains(f[1], Sep) {
		return Rule{}, fmt.Errorf("pattern %q: names no plugin's tool (<plugin>__<tool>, e.g. %s__* for all of a plugin's tools)", f[1], f[1])
	}
	r.Pattern = f[1]
	return r, nil
}

// Parse reads a tool rules file: one rule a line, "#" starting a comment, blank
// lines ignored. Any bad line fails the whole file (every tool is then refused);
// the error names the line.
func Parse(r io.Reader, name string) ([]Rule, error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxFile+1))
	sc.Buffer(make([]byte, 0, 4096), MaxFile+1)
	var rules []Rule
	n, total := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > MaxFile {
			return nil, fmt.Errorf("%s: longer than %d bytes", name, MaxFile)
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		rule, err := ParseRule(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", name, n, err)
		}
		rule.Line = n
		rules = append(rules, rule)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%s line %d: longer than %d bytes", name, n+1, MaxFile)
	} else if err != nil {
		return nil, fmt.Errorf("%s line %d: %w", name, n+1, err)
	}
	return rules, nil
}
