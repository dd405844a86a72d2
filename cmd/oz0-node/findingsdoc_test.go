package main

import (
	"os"
	"strings"
	"testing"
)

// TestFindingsReferenceInOperatorsGuide keeps the findings reference in
// docs/operators.md equal to the codes the node can raise.
func TestFindingsReferenceInOperatorsGuide(t *testing.T) {
	const page = "docs/operators.md"
	b, err := os.ReadFile("../../" + page)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- findings:begin -->\n")
	section, _, ok2 := strings.Cut(rest, "<!-- findings:end -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no findings:begin/end markers", page)
	}
	if want := findingsReference(); section != want {
		t.Errorf("the findings reference in %s is stale; replace it with the output of `oz0-node findings --reference`:\n%s", page, want)
	}
}
