package daemon

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// A message over the limit becomes an error for its own id (the top-level one,
// not one nested in the result), smaller ones pass whole, and the stream goes on.
func TestBoundedLinesAnswersOverlongMessagesWithTheirID(t *testing.T) {
	big := strings.Repeat("x", 300)
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"result":{"text":"ok"}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"id":99,"text":"` + big + `"}]}}`,
		`{"jsonrpc":"2.0","result":{"content":[{"id":98,"text":"` + big + `"}]},"id":8}`,
		`{"jsonrpc":"2.0","id":"s-3","result":{"text":"` + big + `"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"text":"after"}}`,
	}, "\n") + "\n"
	var dropped []string
	b := &boundedLines{in: bufio.NewReaderSize(strings.NewReader(in), 16), max: 200,
		tooLarge: func(id string, size int) { dropped = append(dropped, id) }}
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4 (the id-less overlong one dropped):\n%s", len(lines), out)
	}
	want := []string{`"id":1,"result"`, `"id":7,"error"`, `"id":"s-3","error"`, `"text":"after"`}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s, want it to contain %s", i, lines[i], w)
		}
	}
	if strings.Join(dropped, ",") != `7,,"s-3"` {
		t.Errorf("dropped ids %q", dropped)
	}
}
