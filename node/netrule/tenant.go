package netrule

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MaxTenantList bounds how much of the tenant's egress list is read.
const MaxTenantList = 1 << 20

// TenantList is the tenant's egress list as read now: the one type every reader
// of the list (the proxy, plans, doctor) takes, parsed by ParseTenantList.
type TenantList struct {
	Path     string
	Patterns []Pattern
	// Lines[i] is the line number of Patterns[i].
	Lines []int
	// Missing: there is no file (nothing is allowed, and nothing is wrong).
	Missing bool
	// Err says why the list cannot be used; the proxy then denies everything.
	Err error
}

// Allows reports whether a line of the list allows host:port.
func (t *TenantList) Allows(host string, port int) bool {
	return t != nil && t.Err == nil && slices.ContainsFunc(t.Patterns, func(p Pattern) bool { return p.Match(host, port) })
}

// ParseTenantList reads the tenant's list: one pattern a line ("host", ".suffix",
// optional ":port"), "#" starting a comment, blank lines ignored. Any bad line fails
// the whole list (the caller then denies everything); the error names the line.
// lines[i] is the line number of patterns[i].
func ParseTenantList(r io.Reader, name string) (patterns []Pattern, lines []int, err error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxTenantList+1))
	sc.Buffer(make([]byte, 0, 4096), MaxTenantList+1)
	n, total := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > MaxTenantList {
			return nil, nil, fmt.Errorf("%s: longer than %d bytes", name, MaxTenantList)
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		p, err := ParsePattern(line)
		if err != nil {
			return nil, nil, fmt.Errorf("%s line %d: %w", name, n, err)
		}
		patterns = append(patterns, p)
		lines = append(lines, n)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, nil, fmt.Errorf("%s line %d: longer than %d bytes", name, n+1, MaxTenantList)
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s line %d: %w", name, n+1, err)
	}
	return patterns, lines, nil
}
