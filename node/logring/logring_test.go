package logring

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRingKeepsTheNewestAndTeesRecords(t *testing.T) {
	r := New(3)
	var stderr bytes.Buffer
	log := slog.New(r.Handler(slog.NewJSONHandler(&stderr, nil))).With("sub", "x")
	c, cancel := r.Follow()
	defer cancel()
	for i := range 5 {
		log.Info("step", "i", i, "text", "two\nlines")
	}
	got := r.Last(10)
	if len(got) != 3 || !strings.Contains(got[0], "i=2") || !strings.Contains(got[2], "i=4") {
		t.Fatalf("last lines %q, want records 2..4", got)
	}
	for _, l := range got {
		if !strings.Contains(l, "sub=x") || !strings.Contains(l, `text="two\nlines"`) {
			t.Errorf("line %q lacks the logger's attrs or quotes a newline raw", l)
		}
	}
	if n := strings.Count(stderr.String(), "\n"); n != 5 {
		t.Errorf("stderr got %d records, want 5", n)
	}
	if l := r.Last(1); len(l) != 1 || !strings.Contains(l[0], "i=4") {
		t.Errorf("Last(1) = %q", l)
	}
	for i := range 5 {
		select {
		case l := <-c:
			if !strings.Contains(l, fmt.Sprintf("i=%d", i)) {
				t.Errorf("followed line %d: %q", i, l)
			}
		case <-time.After(time.Second):
			t.Fatalf("followed line %d never came", i)
		}
	}
}
