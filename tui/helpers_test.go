package tui

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"oz0.ai/node/node/api"
)

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

// fixedNow is the clock of every golden: 2h23m45s after the tier-1 node started.
var fixedNow = time.Date(2026, 11, 29, 11, 23, 45, 0, time.UTC)

func loadStatus(t testing.TB, name string) *api.Status {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var st api.Status
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &st
}

// provider is a recorded node behind the real control API: it serves a status,
// streams the events a test pushes, and records the actions the TUI asks for.
type provider struct {
	mu       sync.Mutex
	st       *api.Status
	subs     map[chan api.Event]bool
	restarts []string
	logs     map[string][]string
	follows  map[string][]chan string
}

func newProvider(st *api.Status) *provider {
	return &provider{st: st, subs: map[chan api.Event]bool{}, logs: map[string][]string{}, follows: map[string][]chan string{}}
}

func (p *provider) Status() *api.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func (p *provider) Subscribe() (<-chan api.Event, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan api.Event, 64)
	ch <- api.Event{Type: "status", Time: "2026-11-29T11:23:40Z", Status: p.st}
	p.subs[ch] = true
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.subs[ch] {
			delete(p.subs, ch)
			close(ch)
		}
	}
}

// push sends an event to every subscriber.
func (p *provider) push(ev api.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.subs {
		ch <- ev
	}
}

func (p *provider) Restart(plugin, server string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pl := range p.st.Plugins {
		for _, s := range pl.Servers {
			if pl.Name == plugin && s.Name == server {
				p.restarts = append(p.restarts, plugin+"/"+server)
				return nil
			}
		}
	}
	return errors.New("no server " + plugin + "/" + server)
}

func (p *provider) restarted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.restarts...)
}

func (p *provider) Logs(plugin, server string, n int) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.logs[plugin+"/"+server]
	if !ok {
		return nil, errors.New("no server " + plugin + "/" + server)
	}
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return l, nil
}

func (p *provider) Follow(plugin, server string) (<-chan string, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := plugin + "/" + server
	if _, ok := p.logs[k]; !ok {
		return nil, nil, errors.New("no server " + k)
	}
	ch := make(chan string, 64)
	p.follows[k] = append(p.follows[k], ch)
	return ch, func() {}, nil
}

// logLine appends a line to a server's log and sends it to its followers.
func (p *provider) logLine(k, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.logs[k] = append(p.logs[k], line)
	for _, ch := range p.follows[k] {
		ch <- line
	}
}

func (p *provider) followers(k string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.follows[k])
}

// closeAll ends every event stream, as a node going away does.
// shortTempDir keeps unix socket paths under the 108-byte limit.
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "oz0tui")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// server is the real control API on a real unix socket.
type server struct {
	socket string
	srv    *http.Server
	done   chan struct{}
}

func serve(t testing.TB, p *provider, socket string) *server {
	t.Helper()
	ln, err := api.ListenUnix(socket)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{socket: socket, srv: &http.Server{Handler: api.Handler(p)}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop closes the socket and every open connection, as a node that exits does.
func (s *server) stop() {
	s.srv.Close()
	<-s.done
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorder is the TUI's model with the screens it draws kept for the test: the
// renderer writes only the cells that change, so the output stream does not hold
// whole lines to search; the screens do.
type recorder struct {
	*Model
	mu      sync.Mutex
	frames  []string // drawn since the last take, each different from the one before
	history []string // every one drawn
	last    string
}

func (r *recorder) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := r.Model.Update(msg)
	return r, cmd
}

func (r *recorder) View() tea.View {
	v := r.Model.View()
	r.mu.Lock()
	defer r.mu.Unlock()
	if v.Content != r.last {
		r.frames = append(r.frames, v.Content)
		r.history = append(r.history, v.Content)
		r.last = v.Content
	}
	return v
}

// take returns the screens drawn since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.frames
	r.frames = nil
	return f
}

// waitFor waits until the screens drawn since the last wait hold every string
// between them, read as text (colours aside).
func (r *recorder) waitFor(t testing.TB, d time.Duration, want ...string) {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(d)
	for {
		for _, f := range r.take() {
			seen = append(seen, ansi.Strip(f))
		}
		all := strings.Join(seen, "\n")
		missing := ""
		for _, w := range want {
			if !strings.Contains(all, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			last := ""
			if len(seen) > 0 {
				last = seen[len(seen)-1]
			}
			t.Fatalf("after %s no screen shows %q; the last one:\n%s", d, missing, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allFrames returns every screen drawn so far.
func (r *recorder) allFrames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.history...)
}
