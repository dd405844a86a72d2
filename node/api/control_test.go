package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeProvider struct {
	mu        sync.Mutex
	restarted []string
	events    chan Event
	follow    chan string
	cancelled int
}

func (f *fakeProvider) Status() *Status {
	return &Status{Node: NodeInfo{Version: "test", Tier: 1, Mode: "strict"}, Plugins: []Plugin{{Name: "demo"}}}
}

func (f *fakeProvider) Subscribe() (<-chan Event, func()) {
	return f.events, func() { f.mu.Lock(); f.cancelled++; f.mu.Unlock() }
}

func (f *fakeProvider) Restart(plugin, server string) error {
	if plugin != "demo" {
		return fmt.Errorf("no plugin %s", plugin)
	}
	f.mu.Lock()
	f.restarted = append(f.restarted, plugin+"/"+server)
	f.mu.Unlock()
	return nil
}

func (f *fakeProvider) Logs(plugin, server string, n int) ([]string, error) {
	if plugin != "demo" {
		return nil, fmt.Errorf("no plugin %s", plugin)
	}
	if server == "quiet" {
		return nil, nil
	}
	return []string{fmt.Sprintf("n=%d", n)}, nil
}

func (f *fakeProvider) Follow(plugin, server string) (<-chan string, func(), error) {
	return f.follow, func() {}, nil
}

// serve starts the control API on a socket in a short temp path.
func serve(t *testing.T, p Provider) (string, *Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "oz0api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "run", "control.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(p)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, NewClient(sock)
}

func TestControlSocketIsOwnerOnly(t *testing.T) {
	sock, _ := serve(t, &fakeProvider{})
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket %v, want a 0600 socket", fi.Mode())
	}
}

func TestListenUnixRefusesALiveNodeAndReplacesAStaleSocket(t *testing.T) {
	sock, _ := serve(t, &fakeProvider{})
	if ln, err := ListenUnix(sock); err == nil {
		ln.Close()
		t.Fatal("a second node could listen on a live control socket")
	} else if !strings.Contains(err.Error(), "another node") {
		t.Errorf("err %v", err)
	}
	// A stale socket (nobody listening) is replaced.
	dir, _ := os.MkdirTemp("", "oz0api")
	defer os.RemoveAll(dir)
	stale := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ln, err := ListenUnix(stale)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln.Close()
}

func TestClientStatusRestartLogs(t *testing.T) {
	fp := &fakeProvider{}
	_, c := serve(t, fp)
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil || st.Node.Version != "test" || len(st.Plugins) != 1 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := c.Restart(ctx, "demo", "main"); err != nil {
		t.Errorf("restart: %v", err)
	}
	if err := c.Restart(ctx, "nope", "main"); err == nil || !strings.Contains(err.Error(), "no plugin nope") || !strings.Contains(err.Error(), "404") {
		t.Errorf("restart of an unknown plugin: %v", err)
	}
	fp.mu.Lock()
	if len(fp.restarted) != 1 || fp.restarted[0] != "demo/main" {
		t.Errorf("restarted %v", fp.restarted)
	}
	fp.mu.Unlock()
	for n, want := range map[int]string{5: "n=5", 0: "n=100", -3: "n=100", 10001: "n=100", 10000: "n=10000"} {
		lines, err := c.Logs(ctx, "demo", "main", n)
		if err != nil || len(lines) != 1 || lines[0] != want {
			t.Errorf("Logs(n=%d) = %q, %v; want %s", n, lines, err, want)
		}
	}
	if lines, err := c.Logs(ctx, "demo", "quiet", 1); err != nil || lines == nil || len(lines) != 0 {
		t.Errorf("no lines: %#v, %v (want an empty list, not null)", lines, err)
	}
	if _, err := c.Logs(ctx, "nope", "x", 1); err == nil {
		t.Error("logs of an unknown plugin succeeded")
	}
}

func TestClientSaysNotRunningWithoutASocket(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("err %v, want ErrNotRunning", err)
	}
}

func TestEventsStreamUntilCancelled(t *testing.T) {
	fp := &fakeProvider{events: make(chan Event, 4)}
	fp.events <- Event{Type: "status", Status: &Status{Node: NodeInfo{Version: "first"}}}
	fp.events <- Event{Type: "finding", Finding: &Finding{Code: CodeTier0}}
	_, c := serve(t, fp)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status", "finding"} {
		select {
		case ev := <-ch:
			if ev.Type != want {
				t.Errorf("event %+v, want type %s", ev, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", want)
		}
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the events channel was not closed after cancel")
		}
	}
}

func TestEventsEndWhenTheNodeCloses(t *testing.T) {
	fp := &fakeProvider{events: make(chan Event)}
	_, c := serve(t, fp)
	ch, err := c.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	close(fp.events)
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("an event after the stream closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the events channel stayed open")
	}
}

func TestFollowEndsWhenTheLogEnds(t *testing.T) {
	fp := &fakeProvider{follow: make(chan string, 2)}
	fp.follow <- "live line"
	close(fp.follow)
	sock, _ := serve(t, fp)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /v1/servers/demo/main/logs?n=2&follow=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		t.Fatalf("the follow stream did not end after the log closed: %v (read %d bytes)", err, len(body))
	}
	if string(body) != "n=2\nlive line\n" {
		t.Errorf("body %q", body)
	}
}

func TestHealthAnswers(t *testing.T) {
	sock, _ := serve(t, &fakeProvider{})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	resp, err := hc.Get("http://x/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("health %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	resp, err = hc.Post("http://x/v1/status", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/status: %s", resp.Status)
	}
}
