package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// denied sends a plain request for host through the plugin's real socket and says
// whether the proxy refused it by policy (403).
func (f *fixture) denied(t *testing.T, host string) bool {
	t.Helper()
	c := f.dialUnix(t)
	defer c.Close()
	resp, _ := raw(t, c, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	return resp.StatusCode == 403
}

// deniedUnderChurn is denied for a list that changes every millisecond: each
// change closes the connections the list no longer allows, and a request for a
// refused host may be closed so before its 403 is written. Closed unanswered, it
// is asked again; an answer other than 403 (the host reached) is never retried.
func (f *fixture) deniedUnderChurn(t *testing.T, host string) bool {
	t.Helper()
	for range 20 {
		c := f.dialUnix(t)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := io.WriteString(c, "GET http://"+host+"/ HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		var resp *http.Response
		if err == nil {
			resp, err = http.ReadResponse(bufio.NewReader(c), nil)
		}
		c.Close()
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode == 403
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("request for %s: %v", host, err)
		}
	}
	t.Fatalf("request for %s: closed unanswered 20 times", host)
	return false
}

// A list rewritten every millisecond: a host taken off it is refused within 100 ms
// of the first write, not when the writes stop or the poll comes round. Five
// rounds, each measured: a scheduler pause can hide the fault once, not five times.
func TestTenantChurnAppliesWithin100ms(t *testing.T) {
	f := newFixture(t, true, nil)
	without := strings.Replace(testTenant, hostOther+"\n", "", 1)
	var worst time.Duration
	for round := range 5 {
		writeTenant(t, f.tenant, testTenant)
		eventually(t, 3*time.Second, "the host back on the list", func() bool {
			return slices.Contains(f.p.Status(0).Patterns, hostOther)
		})
		if f.denied(t, hostOther) {
			t.Fatal(hostOther + " is refused before the change")
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var once sync.Once
		stopWriter := func() { once.Do(func() { close(stop); wg.Wait() }) }
		// Stopped before the test's folder goes, however the round ends.
		t.Cleanup(stopWriter)
		wg.Add(1)
		began := time.Now()
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				writeTenant(t, f.tenant, fmt.Sprintf("%s# rewrite %d\n", without, i))
				select {
				case <-stop:
					return
				default:
					time.Sleep(time.Millisecond)
				}
			}
		}()
		var took time.Duration
		for {
			if !slices.Contains(f.p.Status(0).Patterns, hostOther) {
				took = time.Since(began)
				break
			}
			if time.Since(began) > 3*time.Second {
				break
			}
			time.Sleep(time.Millisecond)
		}
		refused := f.deniedUnderChurn(t, hostOther)
		stopWriter()
		t.Logf("round %d: removal applied %v after the first of a write every millisecond", round, took)
		if took == 0 || took > 100*time.Millisecond {
			t.Errorf("round %d: the removal applied after %v (0: never within 3 s) under churn, want within 100 ms", round, took)
		}
		if !refused {
			t.Errorf("round %d: %s is still reached through the proxy after the removal applied", round, hostOther)
		}
		worst = max(worst, took)
	}
	t.Logf("worst of 5: %v", worst)
}

// A list rewritten in place and caught half-written: the torn last line names a
// host (in the manifest) that neither the old nor the new list allows; it must not
// become reachable while the write is in progress. The finished list applies.
func TestTenantRewriteInProgressNeverWidens(t *testing.T) {
	f := newFixture(t, true, nil)
	if !f.denied(t, hostManifest) {
		t.Fatal(hostManifest + " is reached before the change")
	}
	file, err := os.OpenFile(f.tenant, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.WriteString(testTenant + hostManifest); err != nil {
		t.Fatal(err)
	}
	file.Sync()
	// The writer stalls mid-line.
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		if slices.Contains(f.p.Status(0).Patterns, hostManifest) {
			t.Fatalf("a half-written line was applied: %s became allowed", hostManifest)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !f.denied(t, hostManifest) {
		t.Fatalf("%s was reached through the proxy while the list was half-written", hostManifest)
	}
	if _, err := file.WriteString(".test\n"); err != nil {
		t.Fatal(err)
	}
	file.Close()
	took := eventually(t, 2*time.Second, "finished list applied", func() bool {
		return slices.Contains(f.p.Status(0).Patterns, hostManifest+".test")
	})
	t.Logf("finished list applied after %v", took)
	if !f.denied(t, hostManifest) {
		t.Errorf("%s is reached after the rewrite", hostManifest)
	}
}
