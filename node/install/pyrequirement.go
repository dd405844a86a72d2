package install

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"oz0.ai/node/internal/lazyre"
)

// requirement is one Python dependency (PEP 508): a name, version specifiers
// (PEP 440) and an environment marker.
type requirement struct {
	name   string // normalised (PEP 503)
	raw    string
	specs  []string // e.g. ">=1.0", "==2.*"
	marker string   // the environment marker after ";" ("" when none)
	by     string   // what asked for it
}

var (
	reqNameRE  = lazyre.New(`^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$`)
	normNameRE = lazyre.New(`[-_.]+`)
)

func normName(s string) string { return strings.ToLower(normNameRE.ReplaceAllString(s, "-")) }

// parseRequirement parses "name[extras] specs ; marker"; whether the marker lets it
// apply on this node is appliesTo's to say.
func parseRequirement(s, by string) (requirement, error) {
	s = strings.TrimSpace(s)
	spec, marker, _ := strings.Cut(s, ";")
	m := reqNameRE.FindStringSubmatch(strings.TrimSpace(spec))
	if m == nil {
		return requirement{}, fmt.Errorf("python dependency %q (from %s): not a requirement", s, by)
	}
	r := requirement{name: normName(m[1]), raw: s, marker: strings.TrimSpace(marker), by: by}
	rest := strings.TrimSpace(m[3])
	if strings.HasPrefix(rest, "@") {
		return r, fmt.Errorf("python dependency %s (from %s) is a direct reference (%s), not a wheel from wheels/", m[1], by, strings.TrimSpace(rest[1:]))
	}
	rest = strings.Trim(rest, "()")
	for _, sp := range strings.Split(rest, ",") {
		if sp = strings.ReplaceAll(strings.TrimSpace(sp), " ", ""); sp != "" {
			r.specs = append(r.specs, sp)
		}
	}
	return r, nil
}

// appliesTo reports whether r is needed with Python py ("3.X") on this OS: its
// marker, if any, holds.
func (r requirement) appliesTo(py string) bool {
	return r.marker == "" || markerHolds(r.marker, py)
}

// markerHolds evaluates an environment marker for Python pyVer ("3.X") on this OS,
// well enough for dependency lists: clauses joined by "and"/"or" (no parentheses)
// on python_version, sys_platform, platform_system, os_name and extra. What it
// cannot read it takes as true, so such a dependency is required rather than
// silently dropped.
func markerHolds(m, pyVer string) bool {
	env := map[string]string{
		"python_version": pyVer, "python_full_version": pyVer,
		"sys_platform": runtime.GOOS, "platform_system": map[string]string{"linux": "Linux", "darwin": "Darwin"}[runtime.GOOS],
		"os_name": "posix", "extra": "",
	}
	clauseRE := regexp.MustCompile(`^\s*([a-z_]+)\s*(==|!=|>=|<=|>|<|~=|not in|in)\s*["']([^"']*)["']\s*$`)
	for _, alt := range strings.Split(m, " or ") {
		all := true
		for _, c := range strings.Split(alt, " and ") {
			cm := clauseRE.FindStringSubmatch(c)
			if cm == nil {
				continue
			}
			v, known := env[cm[1]]
			if !known {
				continue
			}
			var holds bool
			switch {
			case cm[1] == "python_version" || cm[1] == "python_full_version":
				holds = versionSatisfies(v, cm[2]+cm[3])
			case cm[2] == "==":
				holds = v == cm[3]
			case cm[2] == "!=":
				holds = v != cm[3]
			case cm[2] == "in":
				holds = strings.Contains(cm[3], v) && v != ""
			case cm[2] == "not in":
				holds = !strings.Contains(cm[3], v) || v == ""
			default:
				holds = true
			}
			if !holds {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// releaseOf parses the release part of a version ("1.2.3rc1" → [1 2 3]).
func releaseOf(v string) []int {
	v = strings.TrimPrefix(strings.ToLower(v), "v")
	if i := strings.IndexByte(v, '!'); i >= 0 {
		v = v[i+1:]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		j := 0
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == 0 {
			break
		}
		n, _ := strconv.Atoi(p[:j])
		out = append(out, n)
		if j < len(p) {
			break
		}
	}
	return out
}

func cmpRelease(a, b []int) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

var specRE = lazyre.New(`^(===|==|!=|>=|<=|~=|>|<)(.+)$`)

// versionSatisfies checks one specifier against a version, on release numbers
// (pre- and post-release tags are not distinguished).
func versionSatisfies(v, spec string) bool {
	m := specRE.FindStringSubmatch(spec)
	if m == nil {
		return true
	}
	op, want := m[1], m[2]
	if op == "===" {
		return v == want
	}
	if strings.HasSuffix(want, ".*") && (op == "==" || op == "!=") {
		pre := releaseOf(strings.TrimSuffix(want, ".*"))
		got := releaseOf(v)
		match := len(got) >= len(pre) && cmpRelease(got[:len(pre)], pre) == 0
		return match == (op == "==")
	}
	c := cmpRelease(releaseOf(v), releaseOf(want))
	switch op {
	case "==":
		return c == 0
	case "!=":
		return c != 0
	case ">=":
		return c >= 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case "<":
		return c < 0
	case "~=":
		w := releaseOf(want)
		if len(w) < 2 {
			return c >= 0
		}
		got := releaseOf(v)
		return c >= 0 && len(got) >= len(w)-1 && cmpRelease(got[:len(w)-1], w[:len(w)-1]) == 0
	}
	return true
}
