package lazyre

import (
	"sync"
	"testing"
)

// A pattern compiles once, at first use, from any number of goroutines, and
// answers as regexp does.
func TestCompilesOnceAtFirstUse(t *testing.T) {
	r := New(`^a(b+)c$`)
	if r.re != nil {
		t.Fatal("compiled before first use")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.MatchString("abbc") || r.MatchString("ac") {
				t.Error("wrong match")
			}
		}()
	}
	wg.Wait()
	if m := r.FindStringSubmatch("abbbc"); len(m) != 2 || m[1] != "bbb" {
		t.Errorf("submatch %q", m)
	}
	if r.String() != `^a(b+)c$` {
		t.Errorf("String %q", r.String())
	}
}

func TestInvalidPanicsAtFirstUse(t *testing.T) {
	r := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("an invalid pattern did not panic at first use")
		}
	}()
	r.MatchString("x")
}
