package backenddarwin

import (
	"fmt"
	"strconv"
	"strings"
)

// A small reader for the subset of SBPL the renderer emits, so tests can check
// structure and meaning without a Mac: s-expressions, atoms, strings with only \\
// and \" escapes, and ; comments.

type sexp struct {
	atom   string // set for atoms
	str    string // set for strings (isStr)
	isStr  bool
	list   []sexp
	isList bool
}

func (e sexp) head() string {
	if e.isList && len(e.list) > 0 && !e.list[0].isList && !e.list[0].isStr {
		return e.list[0].atom
	}
	return ""
}

func (e sexp) String() string {
	switch {
	case e.isStr:
		return strconv.Quote(e.str)
	case e.isList:
		var parts []string
		for _, x := range e.list {
			parts = append(parts, x.String())
		}
		return "(" + strings.Join(parts, " ") + ")"
	}
	return e.atom
}

func parseSBPL(src string) ([]sexp, error) {
	p := &reader{src: src}
	var out []sexp
	for {
		p.skip()
		if p.i >= len(p.src) {
			return out, nil
		}
		if p.src[p.i] == ')' {
			return nil, fmt.Errorf("offset %d: unbalanced ')'", p.i)
		}
		e, err := p.expr()
		if err != nil {
			return nil, err
		}
		if !e.isList {
			return nil, fmt.Errorf("offset %d: top-level %s is not a form", p.i, e)
		}
		out = append(out, e)
	}
}

type reader struct {
	src string
	i   int
}

func (p *reader) skip() {
	for p.i < len(p.src) {
		switch c := p.src[p.i]; {
		case c == ' ' || c == '\n' || c == '\t':
			p.i++
		case c == ';':
			for p.i < len(p.src) && p.src[p.i] != '\n' {
				p.i++
			}
		default:
			return
		}
	}
}

func (p *reader) expr() (sexp, error) {
	p.skip()
	if p.i >= len(p.src) {
		return sexp{}, fmt.Errorf("unexpected end of profile")
	}
	switch c := p.src[p.i]; {
	case c == '(':
		p.i++
		e := sexp{isList: true}
		for {
			p.skip()
			if p.i >= len(p.src) {
				return sexp{}, fmt.Errorf("unbalanced '(': end of profile inside a form")
			}
			if p.src[p.i] == ')' {
				p.i++
				return e, nil
			}
			x, err := p.expr()
			if err != nil {
				return sexp{}, err
			}
			e.list = append(e.list, x)
		}
	case c == '"':
		p.i++
		var b strings.Builder
		for {
			if p.i >= len(p.src) {
				return sexp{}, fmt.Errorf("unterminated string")
			}
			c := p.src[p.i]
			p.i++
			switch c {
			case '"':
				return sexp{str: b.String(), isStr: true}, nil
			case '\n':
				return sexp{}, fmt.Errorf("offset %d: newline inside a string", p.i)
			case '\\':
				if p.i >= len(p.src) || (p.src[p.i] != '\\' && p.src[p.i] != '"') {
					return sexp{}, fmt.Errorf("offset %d: bad escape in a string", p.i)
				}
				b.WriteByte(p.src[p.i])
				p.i++
			default:
				b.WriteByte(c)
			}
		}
	default:
		start := p.i
		for p.i < len(p.src) && isAtomByte(p.src[p.i]) {
			p.i++
		}
		if start == p.i {
			return sexp{}, fmt.Errorf("offset %d: unexpected %q", p.i, p.src[p.i])
		}
		return sexp{atom: p.src[start:p.i]}, nil
	}
}

func isAtomByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("*-_.:", c) >= 0
}

// Operations and filters the renderer may use; anything else fails the checks.
var (
	knownOps = map[string]bool{
		"default": true, "process-fork": true, "process-exec": true, "signal": true,
		"process-info*": true, "file-read*": true, "file-read-data": true,
		"file-read-metadata": true, "file-read-xattr": true, "file-write*": true,
		"file-write-data": true, "file-map-executable": true, "file-ioctl": true, "sysctl-read": true,
		"mach-lookup": true, "mach-host*": true, "ipc-posix-sem": true,
		"network-outbound": true, "network-bind": true, "network-inbound": true,
	}
	pathFilters  = map[string]bool{"subpath": true, "literal": true}
	logicFilters = map[string]bool{"require-all": true, "require-any": true, "require-not": true}
	nameFilters  = map[string]bool{"sysctl-name": true, "sysctl-name-prefix": true, "global-name": true}
	// unfiltered are the only operations allowed without a filter.
	unfiltered = map[string]bool{"process-fork": true, "mach-host*": true, "ipc-posix-sem": true}
)

// rule is one parsed (allow|deny OPS… MODIFIERS… FILTERS…) form.
type rule struct {
	action  string
	ops     []string
	message string
	filters []sexp
	index   int
}

// opMatches reports whether a rule operation covers a concrete operation.
func opMatches(ruleOp, op string) bool {
	if ruleOp == "default" || ruleOp == op {
		return true
	}
	if pre, ok := strings.CutSuffix(ruleOp, "*"); ok {
		return strings.HasPrefix(op, pre)
	}
	return false
}
