package backenddarwin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// checked is a profile that passed the structural checks, ready for questions.
type checked struct {
	rules  []rule
	params map[string]string
}

// checkProfile runs every structural check the issue lists on a rendered profile
// for s, then asks the profile what it allows for the places that matter.
func checkProfile(p Profile, s *sandbox.Spec) (*checked, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if n := len(p.Text); n > MaxProfileBytes {
		bad("profile text is %d bytes", n)
	}
	forms, err := parseSBPL(p.Text)
	if err != nil {
		return nil, fmt.Errorf("profile does not parse: %w", err)
	}
	params := map[string]string{}
	for _, prm := range p.Params {
		if _, dup := params[prm.Name]; dup {
			bad("parameter %s given twice", prm.Name)
		}
		params[prm.Name] = prm.Value
		if prm.Value != "/" && strings.Contains(p.Text, prm.Value) {
			bad("parameter %s value %q is spliced into the profile text", prm.Name, prm.Value)
		}
		v := prm.Value
		for _, pre := range []string{"/tmp", "/var", "/etc"} {
			if v == pre || strings.HasPrefix(v, pre+"/") {
				bad("parameter %s=%q is not canonical: macOS names it under /private", prm.Name, v)
			}
		}
		if v != "/" && (strings.HasSuffix(v, "/") || strings.Contains(v, "//")) {
			bad("parameter %s=%q has a trailing or doubled '/'", prm.Name, v)
		}
	}
	if len(forms) < 2 || forms[0].String() != "(version 1)" {
		return nil, errors.New("profile does not start with (version 1)")
	}
	tag := Tag + s.Plugin
	if got := forms[1].String(); got != `(deny default (with message "`+tag+`"))` {
		bad("second form is %s, want (deny default) with the tag", got)
	}
	used := map[string]bool{}
	var rules []rule
	for i, f := range forms[1:] {
		r, err := readRule(f, params, used)
		if err != nil {
			bad("form %s: %v", f, err)
			continue
		}
		r.index = i
		rules = append(rules, r)
	}
	for name := range params {
		if !used[name] {
			bad("parameter %s is never used", name)
		}
	}

	lastAllow, firstDeny := -1, len(rules)
	allowNet := 0
	for _, r := range rules {
		if r.action == "allow" {
			lastAllow = r.index
		} else if r.ops[0] != "default" && r.index < firstDeny {
			firstDeny = r.index
		}
		if r.action == "deny" && r.message != tag {
			bad("deny %v carries message %q, want %q", r.ops, r.message, tag)
		}
		if r.action != "allow" {
			continue
		}
		if len(r.filters) == 0 {
			for _, op := range r.ops {
				if !unfiltered[op] {
					bad("allow %s has no filter", op)
				}
			}
		}
		for _, op := range r.ops {
			isFile := strings.HasPrefix(op, "file-") || op == "process-exec"
			for _, f := range r.filters {
				if isFile != pathFilters[f.head()] {
					bad("allow %s has filter %s", op, f)
				}
			}
			if op == "network-outbound" {
				allowNet++
				want := "none"
				if s.Network == policy.NetProxy && s.Proxy != nil && s.Proxy.Port != 0 {
					want = `(remote ip "localhost:` + strconv.Itoa(s.Proxy.Port) + `")`
				}
				if len(r.filters) != 1 || r.filters[0].String() != want {
					bad("outbound network rule %v, want exactly %s", r.filters, want)
				}
			}
		}
	}
	if want := 0; s.Network == policy.NetProxy && s.Proxy != nil && s.Proxy.Port != 0 {
		want = 1
		if allowNet != want {
			bad("%d outbound network allows, want %d", allowNet, want)
		}
	} else if allowNet != 0 {
		bad("%d outbound network allows for a sandbox without a proxy", allowNet)
	}
	if lastAllow > firstDeny {
		bad("an allow (form %d) follows an explicit deny (form %d): denies must come last", lastAllow, firstDeny)
	}
	c := &checked{rules: rules, params: params}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.checkPlaces(s)
}

func readRule(f sexp, params map[string]string, used map[string]bool) (rule, error) {
	r := rule{action: f.head()}
	if r.action != "allow" && r.action != "deny" {
		return r, fmt.Errorf("unknown form %q", r.action)
	}
	for _, x := range f.list[1:] {
		switch {
		case !x.isList && !x.isStr:
			if !knownOps[x.atom] {
				return r, fmt.Errorf("unknown operation %q", x.atom)
			}
			if len(r.filters) > 0 {
				return r, fmt.Errorf("operation %q after a filter", x.atom)
			}
			r.ops = append(r.ops, x.atom)
		case x.head() == "with":
			if len(x.list) != 3 || x.list[1].atom != "message" || !x.list[2].isStr {
				return r, fmt.Errorf("unknown modifier %s", x)
			}
			r.message = x.list[2].str
		case x.isList:
			if err := checkFilter(x, params, used); err != nil {
				return r, err
			}
			r.filters = append(r.filters, x)
		default:
			return r, fmt.Errorf("stray string %s", x)
		}
	}
	if len(r.ops) == 0 {
		return r, errors.New("no operation")
	}
	return r, nil
}

func checkFilter(f sexp, params map[string]string, used map[string]bool) error {
	h := f.head()
	switch {
	case pathFilters[h]:
		// Paths come only as parameters: (subpath (param "NAME")).
		if len(f.list) != 2 || f.list[1].head() != "param" || len(f.list[1].list) != 2 || !f.list[1].list[1].isStr {
			return fmt.Errorf("path filter %s does not take a parameter", f)
		}
		name := f.list[1].list[1].str
		if _, ok := params[name]; !ok {
			return fmt.Errorf("path filter %s names an undefined parameter", f)
		}
		used[name] = true
	case logicFilters[h]:
		if len(f.list) < 2 || h == "require-not" && len(f.list) != 2 {
			return fmt.Errorf("malformed %s", f)
		}
		for _, x := range f.list[1:] {
			if err := checkFilter(x, params, used); err != nil {
				return err
			}
		}
	case nameFilters[h]:
		if len(f.list) != 2 || !f.list[1].isStr || f.list[1].str == "" {
			return fmt.Errorf("malformed %s", f)
		}
	case h == "target":
		if f.String() != "(target same-sandbox)" {
			return fmt.Errorf("unexpected %s", f)
		}
	case h == "remote":
		if len(f.list) != 3 || f.list[1].atom != "ip" || !f.list[2].isStr || !strings.HasPrefix(f.list[2].str, "localhost:") {
			return fmt.Errorf("network filter %s is not (remote ip \"localhost:PORT\")", f)
		}
	default:
		return fmt.Errorf("unknown filter %s", f)
	}
	return nil
}

// matches evaluates a filter for a path.
func (c *checked) matches(f sexp, path string) bool {
	switch f.head() {
	case "subpath":
		return within(path, c.params[f.list[1].list[1].str])
	case "literal":
		return path == c.params[f.list[1].list[1].str]
	case "require-all":
		for _, x := range f.list[1:] {
			if !c.matches(x, path) {
				return false
			}
		}
		return true
	case "require-any":
		for _, x := range f.list[1:] {
			if c.matches(x, path) {
				return true
			}
		}
		return false
	case "require-not":
		return !c.matches(f.list[1], path)
	}
	return false
}

// decide answers allow or deny for a file operation on a path, the last matching
// rule winning (Seatbelt's order for rules with path filters).
func (c *checked) decide(op, path string) string { return c.decideFrom(op, path, "deny", true) }

// explicit is decide without (deny default): "none" when no rule names the path.
// Denied places must be denied by a rule of their own, not merely left out.
func (c *checked) explicit(op, path string) string {
	return c.decideFrom(op, path, "none", false)
}

func (c *checked) decideFrom(op, path, out string, useDefault bool) string {
	for _, r := range c.rules {
		hit := false
		for _, o := range r.ops {
			hit = hit || opMatches(o, op)
		}
		if !hit {
			continue
		}
		if r.ops[0] == "default" {
			if useDefault {
				out = r.action
			}
			continue
		}
		for _, f := range r.filters {
			if pathFilters[f.head()] || logicFilters[f.head()] {
				if c.matches(f, path) {
					out = r.action
					break
				}
			}
		}
	}
	return out
}

var fileOps = []string{"file-read-data", "file-read-metadata", "file-read-xattr", "file-write-data", "file-write-create", "file-write-unlink", "process-exec", "file-map-executable"}

// execOps run code from a file: only read-only places may.
var execOps = map[string]bool{"process-exec": true, "file-map-executable": true}

// checkPlaces asks the profile about the places the issue names: the data folder,
// the key and other plugins are denied for every operation (the data folder's
// parents of this plugin's folders may only be stat'ed); the plugin folder is read
// only; the home is writable; /private/tmp is out of reach.
func (c *checked) checkPlaces(s *sandbox.Spec) error {
	var errs []error
	expect := func(op, path, want string) {
		if got := c.decide(op, path); got != want {
			errs = append(errs, fmt.Errorf("%s %q: %s, want %s", op, path, got, want))
		}
	}
	expectDenied := func(op, path string) {
		expect(op, path, "deny")
		if got := c.explicit(op, path); got != "deny" {
			errs = append(errs, fmt.Errorf("%s %q: denied only by default, want an explicit deny", op, path))
		}
	}
	canon := func(p string) string {
		v, err := Canonical(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("canonical %q: %w", p, err))
		}
		return v
	}
	data, pdir, home := canon(s.DataDir), canon(s.PluginDir), canon(s.Home)
	var mounts []string
	for _, m := range s.Mounts {
		mounts = append(mounts, canon(m.Source))
	}
	mounts = append(mounts, pdir, home)
	inMount := func(p string) bool {
		for _, m := range mounts {
			if within(p, m) {
				return true
			}
		}
		return false
	}
	aboveMount := func(p string) bool {
		for _, m := range mounts {
			if within(m, p) && m != p {
				return true
			}
		}
		return false
	}
	for _, d := range append([]string{s.DataDir}, s.Deny...) {
		d = canon(d)
		for _, probe := range []string{d, d + "/zz-probe"} {
			if inMount(probe) {
				continue
			}
			for _, op := range fileOps {
				if op == "file-read-metadata" && aboveMount(probe) {
					expect(op, probe, "allow")
				} else {
					expectDenied(op, probe)
				}
			}
		}
	}
	for _, op := range fileOps {
		want := "deny"
		if strings.HasPrefix(op, "file-read") || execOps[op] {
			want = "allow"
		}
		expect(op, pdir+"/server.py", want)
		want = "allow"
		if execOps[op] {
			want = "deny"
		}
		expect(op, home+"/tmp/f", want)
		if !inMount("/private/tmp/zz-probe") {
			expect(op, "/private/tmp/zz-probe", "deny")
		}
	}
	// No allow reaches a denied place other than stat'ing a parent of an allowed one.
	for _, r := range c.rules {
		if r.action != "allow" {
			continue
		}
		for _, f := range r.filters {
			if !pathFilters[f.head()] {
				continue
			}
			v := c.params[f.list[1].list[1].str]
			for _, d := range append([]string{data}, s.Deny...) {
				d = canon(d)
				switch {
				case within(v, d) && inMount(v):
				case f.head() == "literal" && len(r.ops) == 1 && r.ops[0] == "file-read-metadata" && aboveMount(v):
				case within(v, d) || within(d, v) && f.head() == "subpath":
					errs = append(errs, fmt.Errorf("allow %v %s reaches the denied %q", r.ops, f, d))
				}
			}
		}
	}
	return errors.Join(errs...)
}
