package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// A sandboxed server floods what the byte scan of notifications does not see:
// answers to requests the node never made, lines that are no message, and
// notifications with an escaped key. Each is dropped over the server's rate and
// counted, and the node does not spend a core on it (answers to nothing and lines
// that are no message were decoded without limit, escaped notifications paced
// only after a decode each: 0.5 to 1.2 cores).
func TestE2EServerFloodOfUnseenShapesIsBounded(t *testing.T) {
	n := newE2E(t, []string{"unruly"}, "--backend", backendsForE2E(t)[0])
	n.waitState("unruly", "main", api.StateRunning)
	pid := n.cmd.Process.Pid
	droppedNow := func() int64 { return n.notesDropped("unruly", "main") }
	for _, kind := range []string{"answer", "garbage", "escaped"} {
		before := droppedNow()
		done := make(chan string, 1)
		go func() {
			out, err := n.oz("call", "unruly__flood", "--arg", "kind="+kind, "--arg", "seconds=5", "--timeout", "120s")
			done <- fmt.Sprintf("%v %s", err, out)
		}()
		time.Sleep(time.Second)
		cpu0, t0 := procCPU(t, pid), time.Now()
		time.Sleep(3 * time.Second)
		cores := float64(procCPU(t, pid)-cpu0) / float64(time.Since(t0))
		sent := <-done
		dropped := droppedNow() - before
		t.Logf("%s flood: node CPU %.2f cores, %d dropped; flood: %s", kind, cores, dropped, strings.TrimSpace(sent))
		if !strings.Contains(sent, "sent ") {
			t.Fatalf("the %s flood call failed: %s", kind, sent)
		}
		if dropped == 0 {
			t.Errorf("status counts nothing of the %s flood dropped", kind)
		}
		if cores > 0.3 {
			t.Errorf("the node used %.2f cores while a server flooded %s lines", cores, kind)
		}
	}
	if out, err := n.oz("call", "unruly__echo", "--arg", "text=after", "--timeout", "30s"); err != nil || strings.TrimSpace(out) != "after" {
		t.Errorf("echo on the flooding server after its floods: %v %q", err, out)
	}
}
