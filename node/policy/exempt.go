package policy

import (
	"fmt"
	"strings"

	"oz0.ai/node/internal/lazyre"
	"oz0.ai/node/node/manifest"
)

// Exemption is one --plugin-sandbox-exempt value: a plugin name, optionally pinned
// to one commit.
type Exemption struct {
	Name   string `json:"name"`
	Commit string `json:"commit,omitempty"`
}

func (e Exemption) String() string {
	if e.Commit == "" {
		return e.Name
	}
	return e.Name + "@" + e.Commit
}

var (
	commitRE = lazyre.New(`^[0-9a-f]{7,64}$`)
)

// ParseExemptions parses flag values; each may hold several comma-separated entries
// ("a,b@<sha>"). Duplicates are merged.
func ParseExemptions(values []string) ([]Exemption, error) {
	var out []Exemption
	seen := map[Exemption]bool{}
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				return nil, fmt.Errorf("--plugin-sandbox-exempt %q: empty entry", v)
			}
			name, commit, hasAt := strings.Cut(item, "@")
			if !manifest.ValidName(name) {
				return nil, fmt.Errorf("--plugin-sandbox-exempt %q: %q is not a plugin name (kebab-case)", v, name)
			}
			if hasAt {
				commit = strings.ToLower(commit)
				if !commitRE.MatchString(commit) {
					return nil, fmt.Errorf("--plugin-sandbox-exempt %q: %q is not a commit (7 to 64 hex digits)", v, commit)
				}
			}
			e := Exemption{Name: name, Commit: commit}
			if !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// ExemptionMatch says which exemption, if any, covers a plugin at a commit.
type ExemptionMatch struct {
	Matched    string   // the flag value that exempts it ("" if none)
	Mismatched []string // NAME@COMMIT values naming the plugin at another commit
}

// MatchExemptions finds the exemption covering plugin name at commit. A NAME
// exemption covers any commit; NAME@COMMIT covers the commit it names (a prefix of
// at least 7 hex digits is accepted).
func MatchExemptions(es []Exemption, name, commit string) ExemptionMatch {
	var r ExemptionMatch
	for _, e := range es {
		if e.Name != name {
			continue
		}
		pin := strings.ToLower(e.Commit)
		if pin == "" || (len(pin) >= 7 && strings.HasPrefix(strings.ToLower(commit), pin)) {
			if r.Matched == "" {
				r.Matched = e.String()
			}
			continue
		}
		r.Mismatched = append(r.Mismatched, e.String())
	}
	if r.Matched != "" {
		r.Mismatched = nil
	}
	return r
}
