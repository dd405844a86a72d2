package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEFindingsReference keeps the README's findings reference equal to the
// codes the node can raise.
func TestREADMEFindingsReference(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- findings:begin -->\n")
	section, _, ok2 := strings.Cut(rest, "<!-- findings:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no findings:begin/end markers")
	}
	if want := findingsReference(); section != want {
		t.Errorf("README findings reference is stale; replace it with the output of `oz0-node findings --reference`:\n%s", want)
	}
}
