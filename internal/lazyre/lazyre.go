// Package lazyre holds regular expressions that compile when first used. A
// package-level regexp.MustCompile runs at every start of the binary, whichever
// command runs; most commands need few of the node's patterns, and a short-lived
// one (exec, hook) pays for each at start.
package lazyre

import (
	"regexp"
	"sync"
)

// RE is a regular expression compiled at first use. An invalid expression panics
// there, as regexp.MustCompile would at start.
type RE struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New is expr, not compiled yet.
func New(expr string) *RE { return &RE{expr: expr} }

// Regexp is the compiled expression.
func (r *RE) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// String is the source text.
func (r *RE) String() string { return r.expr }

func (r *RE) MatchString(s string) bool                { return r.Regexp().MatchString(s) }
func (r *RE) FindStringSubmatch(s string) []string     { return r.Regexp().FindStringSubmatch(s) }
func (r *RE) FindStringIndex(s string) []int           { return r.Regexp().FindStringIndex(s) }
func (r *RE) FindSubmatch(b []byte) [][]byte           { return r.Regexp().FindSubmatch(b) }
func (r *RE) ReplaceAllString(src, repl string) string { return r.Regexp().ReplaceAllString(src, repl) }
func (r *RE) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Regexp().FindAllStringSubmatch(s, n)
}
func (r *RE) ReplaceAllStringFunc(src string, repl func(string) string) string {
	return r.Regexp().ReplaceAllStringFunc(src, repl)
}
