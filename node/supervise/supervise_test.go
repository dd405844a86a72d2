package supervise

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// fakeSession ends when its done channel closes; the supervisor's bookkeeping is
// what is under test here, so the "server" is a channel.
type fakeSession struct {
	done chan struct{}
	once sync.Once
}

func (f *fakeSession) Wait() error { <-f.done; return errors.New("exit status 3") }
func (f *fakeSession) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

func TestCrashLoopFindingAndBackoff(t *testing.T) {
	var starts atomic.Int32
	findings := make(chan api.Finding, 4)
	s := New(Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, CrashLoop: 3, CrashWindow: time.Minute,
		OnFinding: func(f api.Finding) { findings <- f }})
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) {
			starts.Add(1)
			io.WriteString(stderr, "boom\n")
			return nil, errors.New("exit status 1")
		}})
	defer s.StopAll()
	select {
	case f := <-findings:
		if f.Code != api.CodeCrashLoop || f.Subject != "p/s" || !strings.Contains(f.Message, "boom") {
			t.Errorf("finding %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no crash-loop finding")
	}
	if st := s.Status()["p/s"]; st.Restarts < 3 {
		t.Errorf("restarts %d", st.Restarts)
	}
}

func TestOperatorRestartIsNotACrash(t *testing.T) {
	var sess atomic.Pointer[fakeSession]
	s := New(Options{MinBackoff: time.Hour})
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) {
			f := &fakeSession{done: make(chan struct{})}
			sess.Store(f)
			return f, nil
		}})
	defer s.StopAll()
	waitState(t, s, api.StateRunning)
	first := sess.Load()
	if err := s.Restart("p/s"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sess.Load() == first && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if sess.Load() == first {
		t.Fatal("operator restart did not start a new instance at once (a one-hour back-off would have)")
	}
	if st := s.Status()["p/s"]; st.Restarts != 0 {
		t.Errorf("operator restart counted as a crash: restarts %d", st.Restarts)
	}
}

func TestRemoveStopsAndCloses(t *testing.T) {
	f := &fakeSession{done: make(chan struct{})}
	s := New(Options{})
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) { return f, nil }})
	waitState(t, s, api.StateRunning)
	s.Remove("p/s")
	select {
	case <-f.done:
	default:
		t.Fatal("session not closed on remove")
	}
	if _, ok := s.Status()["p/s"]; ok {
		t.Fatal("unit still listed")
	}
}

func TestRingKeepsLastLines(t *testing.T) {
	r := NewRing(3, LogOptions{})
	io.WriteString(r, "a\nb\nc\nd\npart")
	io.WriteString(r, "ial\n")
	got := strings.Join(r.Lines(0), ",")
	if got != "c,d,partial" {
		t.Errorf("lines %q", got)
	}
}

func waitState(t *testing.T, s *Supervisor, state string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.Status()["p/s"].State == state {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("state %q not reached: %+v", state, s.Status()["p/s"])
}

func TestRingRotatesAndDropsAFlood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.s.log")
	now := time.Unix(1000, 0)
	var floods []int64
	r := NewRing(10, LogOptions{Path: path, MaxBytes: 64 << 10, Files: 3, FloodBytes: 100 << 10, FloodWindow: time.Second,
		Now: func() time.Time { return now }, OnFlood: func(d int64) { floods = append(floods, d) }})
	line := []byte(strings.Repeat("x", 1023) + "\n")
	// 1 MiB within one window: 100 KiB kept, the rest dropped and reported once.
	for range 1024 {
		r.Write(line)
	}
	if d, n := r.Dropped(); d != (1<<20)-(100<<10) || n != 1 || len(floods) != 1 {
		t.Errorf("dropped %d bytes in %d floods (reported %v)", d, n, floods)
	}
	// Later windows at the budget: nothing more dropped, the log rotates.
	for range 10 {
		now = now.Add(time.Second)
		for range 100 {
			r.Write(line)
		}
	}
	r.Close()
	if d, _ := r.Dropped(); d != (1<<20)-(100<<10) {
		t.Errorf("dropped %d after the flood", d)
	}
	var total int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
		if fi.Size() > 64<<10 {
			t.Errorf("%s is %d bytes, over the cap", e.Name(), fi.Size())
		}
	}
	if len(ents) != 3 || total > 3*64<<10 {
		t.Errorf("%d files, %d bytes: want 3 files within the cap", len(ents), total)
	}
	if got := r.Lines(1); len(got) != 1 || !strings.HasPrefix(got[0], "xxx") {
		t.Errorf("ring lines %v", got)
	}
}

// wedgedSession's Close waits, as the SDK's does, until its call in flight ends
// (here: up to 10 s); only Interrupt ends that call.
type wedgedSession struct {
	ended  chan struct{}
	cause  error
	once   sync.Once
	closed chan struct{}
	cOnce  sync.Once
}

func newWedged() *wedgedSession {
	return &wedgedSession{ended: make(chan struct{}), closed: make(chan struct{})}
}

func (w *wedgedSession) Wait() error { <-w.closed; return nil }
func (w *wedgedSession) Interrupt(cause error) {
	w.once.Do(func() { w.cause = cause; close(w.ended) })
}
func (w *wedgedSession) Close() error {
	select {
	case <-w.ended:
	case <-time.After(10 * time.Second):
	}
	w.cOnce.Do(func() { close(w.closed) })
	return nil
}

func TestRestartInterruptsCallsInFlight(t *testing.T) {
	var states []string
	var mu sync.Mutex
	s := New(Options{OnChange: func(ev api.ServerEvent) {
		mu.Lock()
		states = append(states, ev.State+":"+ev.Detail)
		mu.Unlock()
	}})
	causes := make(chan error, 4)
	var starts atomic.Int32
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) {
			starts.Add(1)
			w := newWedged()
			go func() {
				// The "call in flight" reports how it ended.
				<-w.ended
				causes <- w.cause
			}()
			return w, nil
		}})
	defer s.StopAll()
	waitState(t, s, api.StateRunning)
	if err := s.Restart("p/s"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-causes:
		if c == nil || !strings.Contains(c.Error(), "restarted by the operator") {
			t.Errorf("cause %v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight was not interrupted within 5 s of the restart")
	}
	deadline := time.Now().Add(5 * time.Second)
	for starts.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if starts.Load() < 2 {
		t.Fatal("no new instance after the restart")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(states, func(s string) bool { return strings.HasPrefix(s, api.StateStarting+":restarting") }) {
		t.Errorf("status never said the server was restarting: %v", states)
	}
}

// frozenSession answers pings while alive and not frozen; a frozen one (a
// server stopped with SIGSTOP) answers nothing, so its ping runs out of time.
type frozenSession struct {
	*wedgedSession
	frozen atomic.Bool
	busy   atomic.Bool
	pings  atomic.Int32
}

func (f *frozenSession) Busy() bool { return f.busy.Load() }
func (f *frozenSession) Ping(ctx context.Context) error {
	f.pings.Add(1)
	if !f.frozen.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// A running server that stops answering is pinged while idle, reported
// unresponsive (state, a finding with its last stderr) and restarted; its call in
// flight ends with the reason. A busy server is not pinged on the schedule, only
// when asked (Check: a call ran out of its deadline).
func TestUnresponsiveServerIsReportedAndRestarted(t *testing.T) {
	findings := make(chan api.Finding, 4)
	var mu sync.Mutex
	var states []string
	s := New(Options{PingEvery: 20 * time.Millisecond, PingTimeout: 50 * time.Millisecond, MinBackoff: time.Millisecond,
		OnFinding: func(f api.Finding) { findings <- f },
		OnChange: func(ev api.ServerEvent) {
			mu.Lock()
			states = append(states, ev.State)
			mu.Unlock()
		}})
	var cur atomic.Pointer[frozenSession]
	causes := make(chan error, 4)
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) {
			io.WriteString(stderr, "serving\n")
			f := &frozenSession{wedgedSession: newWedged()}
			go func() { <-f.ended; causes <- f.cause }()
			cur.Store(f)
			return f, nil
		}})
	defer s.StopAll()
	waitState(t, s, api.StateRunning)
	first := cur.Load()
	// Busy and frozen: the schedule leaves it alone.
	first.busy.Store(true)
	first.frozen.Store(true)
	time.Sleep(200 * time.Millisecond)
	if n := first.pings.Load(); n != 0 {
		t.Fatalf("a busy server was pinged %d times on the schedule", n)
	}
	if st := s.Status()["p/s"]; st.State != api.StateRunning || st.Restarts != 0 {
		t.Fatalf("busy server: %+v", st)
	}
	// A call ran out of time: checked now, busy or not.
	s.Check("p/s")
	select {
	case c := <-causes:
		if c == nil || !strings.Contains(c.Error(), "p/s is unresponsive") || !strings.Contains(c.Error(), "being restarted") {
			t.Errorf("the call in flight ended with %v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight of an unresponsive server was not ended")
	}
	select {
	case f := <-findings:
		if f.Code != api.CodeUnresponsive || f.Subject != "p/s" || !strings.Contains(f.Message, "did not answer a ping within 50ms") || !strings.Contains(f.Message, "serving") {
			t.Errorf("finding %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no finding")
	}
	deadline := time.Now().Add(5 * time.Second)
	for cur.Load() == first && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if cur.Load() == first {
		t.Fatal("the unresponsive server was not restarted")
	}
	waitState(t, s, api.StateRunning)
	st := s.Status()["p/s"]
	if st.Restarts != 1 || !strings.Contains(st.LastRestart, "unresponsive") {
		t.Errorf("after the restart: %+v", st)
	}
	mu.Lock()
	saw := slices.Contains(states, api.StateUnresponsive)
	mu.Unlock()
	if !saw {
		t.Errorf("status never said unresponsive: %v", states)
	}
	// Idle and frozen: found on the schedule.
	second := cur.Load()
	second.frozen.Store(true)
	select {
	case f := <-findings:
		if f.Code != api.CodeUnresponsive {
			t.Errorf("finding %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle frozen server was not found on the schedule")
	}
}

// An operator's restart shows in status: its own count and the last restart's
// reason; it is not counted as a crash.
func TestOperatorRestartShowsInStatus(t *testing.T) {
	s := New(Options{MinBackoff: time.Hour})
	var starts atomic.Int32
	s.Add(context.Background(), &Unit{Plugin: "p", Server: "s", UpState: api.StateRunning,
		Start: func(ctx context.Context, stderr io.Writer) (Session, error) {
			starts.Add(1)
			return &fakeSession{done: make(chan struct{})}, nil
		}})
	defer s.StopAll()
	waitState(t, s, api.StateRunning)
	for i := 2; i <= 3; i++ {
		if err := s.Restart("p/s"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for starts.Load() < int32(i) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		waitState(t, s, api.StateRunning)
	}
	st := s.Status()["p/s"]
	if st.OperatorRestarts != 2 || st.Restarts != 0 || !strings.Contains(st.LastRestart, "the operator asked") {
		t.Errorf("status after two operator restarts: %+v", st)
	}
}
