package mcpdoor

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter holds its first write until released, and counts its writes.
type gatedWriter struct {
	mu      sync.Mutex
	out     bytes.Buffer
	writes  int
	started chan struct{}
	release chan struct{}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	first := w.writes == 1
	w.mu.Unlock()
	if first {
		close(w.started)
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

// Answers that come while a write to the caller is under way go out together
// in the next write, each whole.
func TestCallerConnBatchesAnswersBehindAWrite(t *testing.T) {
	w := &gatedWriter{started: make(chan struct{}), release: make(chan struct{})}
	c := newCallerConn(strings.NewReader(""), w, nil, MaxLine)
	var wg sync.WaitGroup
	wg.Go(func() { c.writeLine([]byte(`{"id":0}`)) })
	<-w.started
	for i := 1; i <= 10; i++ {
		wg.Go(func() { c.writeLine([]byte(fmt.Sprintf(`{"id":%d}`, i))) })
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.wmu.Lock()
		n := bytes.Count(c.queued, []byte("\n"))
		c.wmu.Unlock()
		if n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d answers queued behind the write; want 10", n)
		}
	}
	close(w.release)
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(w.out.String(), "\n"), "\n")
	if w.writes != 2 || len(lines) != 11 {
		t.Errorf("%d writes for %d lines; want 2 for 11:\n%s", w.writes, len(lines), w.out.String())
	}
	for i := range 11 {
		if !strings.Contains(w.out.String(), fmt.Sprintf(`{"id":%d}`+"\n", i)) {
			t.Errorf("answer %d missing or cut: %q", i, w.out.String())
		}
	}
}
