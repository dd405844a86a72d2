package manifest

import "strings"

// MatcherNames is how MatchTool reads a matcher that is no regular expression:
// the names it lists (none for "" and "*", which match everything). plain is
// false for a matcher read as a regular expression.
func MatcherNames(matcher string) (names []string, plain bool) {
	if matcher == "" || matcher == "*" {
		return nil, true
	}
	if !plainMatcherRE.MatchString(matcher) {
		return nil, false
	}
	for _, alt := range strings.FieldsFunc(matcher, func(r rune) bool { return r == '|' || r == ',' }) {
		if n := strings.TrimSpace(alt); n != "" {
			names = append(names, n)
		}
	}
	return names, true
}
