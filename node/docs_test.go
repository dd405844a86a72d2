package node

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestArchitectureNamesEveryPackage keeps docs/architecture.md's package map and
// the module's packages (`go list ./...`, on every OS the node builds for) naming
// the same packages: a package the page leaves out is a room nobody can find, and
// one it names that is gone misleads.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	onPage, err := packageMap(string(b))
	if err != nil {
		t.Fatal(err)
	}
	inModule := map[string]bool{}
	for _, goos := range oses {
		for path := range goList(t, goos, "./...") {
			if rel, ok := strings.CutPrefix(path, module+"/"); ok {
				inModule[rel] = true
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(inModule)) {
		if !onPage[p] {
			t.Errorf("package %s is not in docs/architecture.md's package map: add a row saying what it is (its floor: farm-studio look)", p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(onPage)) {
		if !inModule[p] {
			t.Errorf("docs/architecture.md's package map names %s, which go list ./... does not", p)
		}
	}
}

// packageMap returns the packages the table under "## The package map" names:
// every `path` in its second column.
func packageMap(page string) (map[string]bool, error) {
	_, rest, ok := strings.Cut(page, "\n## The package map\n")
	if !ok {
		return nil, fmt.Errorf("docs/architecture.md has no \"## The package map\" section")
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	names := map[string]bool{}
	code := regexp.MustCompile("`([^`]+)`")
	for line := range strings.SplitSeq(rest, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("docs/architecture.md's package map names no package")
	}
	return names, nil
}

// TestDocLinksResolve keeps every relative link of the README and docs/ pointing
// at a file that exists and, for a #fragment into a Markdown page, at a heading
// that page has: facts live on one page each, and the others link to them.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(proseOf(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", page, target)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", page, target, path)
			}
		}
	}
}

// TestREADMEIsAFrontPage keeps the README short: what the node is, how to start,
// the promises in a line each, and links. What it would retell belongs to the page
// of docs/ that holds that fact.
func TestREADMEIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b); n > 12<<10 {
		t.Errorf("README.md is %d bytes, over 12 KiB: move what it retells to the page of docs/ that holds it, and link there", n)
	}
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// proseOf drops fenced code blocks and inline code, where brackets are not links.
func proseOf(md string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(inlineCode.ReplaceAllString(line, "``"))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// headingAnchors returns the anchors a Markdown renderer gives a page's headings:
// lower case, spaces to hyphens, punctuation dropped, a repeated one numbered.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				slug.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}
