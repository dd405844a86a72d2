package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// A node run by systemd (Type=notify): a real `oz0-node run` with NOTIFY_SOCKET
// pointing at a datagram socket this test reads, as systemd's would be. READY=1
// comes only once the control socket answers and the first reconcile has listed the
// installed plugin; WATCHDOG=1 pings follow at half of WATCHDOG_USEC; STOPPING=1 at
// SIGTERM.
func TestE2ESystemdReadinessAndWatchdog(t *testing.T) {
	n := newE2E(t, []string{"demo"}, "--backend", "none")
	n.stop()

	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:k])
		}
	}()

	n.cmd = exec.Command(n.bin, "--data-dir", n.data, "run", "--log-format", "text", "--backend", "none")
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(n.cmd, n.exited)

	d, _ := datadir.New(n.data)
	next := func(within time.Duration) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-n.exited:
			t.Fatalf("node exited:\n%s", n.log.String())
		case <-time.After(within):
			t.Fatalf("no notification within %s:\n%s", within, n.log.String())
		}
		return ""
	}
	if m := next(60 * time.Second); m != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", m)
	}
	// Asked at once: the socket answers and the first reconcile is in the status.
	st, err := api.NewClient(d.Control()).Status(context.Background())
	if err != nil {
		t.Fatalf("READY=1 before the control socket answers: %v", err)
	}
	if len(st.Plugins) != 1 || st.Plugins[0].Name != "demo" {
		t.Fatalf("READY=1 before the first reconcile: plugins %+v", st.Plugins)
	}

	start := time.Now()
	for i := 0; i < 3; i++ {
		if m := next(2 * time.Second); m != "WATCHDOG=1" {
			t.Fatalf("notification %q, want WATCHDOG=1", m)
		}
	}
	if el := time.Since(start); el < 400*time.Millisecond || el > 1500*time.Millisecond {
		t.Errorf("3 watchdog pings took %s, want about 600ms (every WATCHDOG_USEC/2)", el)
	}

	n.cmd.Process.Signal(syscall.SIGTERM)
	for {
		m := next(20 * time.Second)
		if m == "STOPPING=1" {
			break
		}
		if !strings.HasPrefix(m, "WATCHDOG=1") {
			t.Fatalf("notification %q at shutdown, want STOPPING=1", m)
		}
	}
	<-n.exited
	n.cmd = nil
}
