package approval

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"oz0.ai/node/node/api"
)

// waitFor polls until the book lists n approvals.
func waitFor(t *testing.T, b *Book, n int) []api.Approval {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if l := b.List(); len(l) == n && (n == 0 || l[0].Waiting > 0) {
			return l
		}
	}
	t.Fatalf("the book never listed %d approvals: %+v", n, b.List())
	return nil
}

var host = Request{Kind: "egress", Plugin: "weather", Server: "main", Host: "api.example.com", Port: 443,
	Reason: "the forecast", Refusal: "the tenant list does not name api.example.com:443", Always: true}

func TestOnceLetsTheOldestThroughAndCountsTheAsks(t *testing.T) {
	var ends []Outcome
	var mu sync.Mutex
	b := &Book{Wait: 10 * time.Second, OnEnd: func(a api.Approval, o Outcome) { mu.Lock(); ends = append(ends, o); mu.Unlock() }}
	got := make(chan Outcome, 2)
	go func() { got <- b.Ask(context.Background(), host) }()
	waitFor(t, b, 1)
	go func() { got <- b.Ask(context.Background(), host) }()
	for deadline := time.Now().Add(5 * time.Second); b.List()[0].Asked < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second ask did not join the first")
		}
	}
	l := b.List()
	if len(l) != 1 || l[0].Asked != 2 || l[0].Waiting != 2 || l[0].Reason != "the forecast" || l[0].ID != "1" || l[0].Expires == "" {
		t.Fatalf("one approval asked twice, got %+v", l)
	}
	if err := b.Answer("1", api.AnswerOnce, "root (uid 0) via cli"); err != nil {
		t.Fatal(err)
	}
	if o := <-got; !o.Allowed() || o.Answer != api.AnswerOnce || o.By != "root (uid 0) via cli" {
		t.Fatalf("once: %+v", o)
	}
	// The second request still waits: once is one request.
	if l := b.List(); len(l) != 1 || l[0].Waiting != 1 {
		t.Fatalf("after once: %+v", l)
	}
	if err := b.Answer("1", api.AnswerDeny, "root"); err != nil {
		t.Fatal(err)
	}
	if o := <-got; o.Allowed() || o.Answer != api.AnswerDeny {
		t.Fatalf("deny: %+v", o)
	}
	if len(b.List()) != 0 {
		t.Fatal("an answered approval is still listed")
	}
	if err := b.Answer("1", api.AnswerOnce, "root"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("answering a gone approval: %v", err)
	}
	if len(ends) != 2 || ends[0].Answer != api.AnswerOnce || ends[1].Answer != api.AnswerDeny {
		t.Fatalf("OnEnd saw %+v", ends)
	}
}

func TestAlwaysWritesFirstAndReleasesAll(t *testing.T) {
	var wrote []string
	fail := true
	b := &Book{Wait: 10 * time.Second, Always: func(r Request, by string) error {
		if fail {
			return errors.New("disk full")
		}
		wrote = append(wrote, r.Host+" by "+by)
		return nil
	}}
	got := make(chan Outcome, 3)
	for range 3 {
		go func() { got <- b.Ask(context.Background(), host) }()
	}
	for deadline := time.Now().Add(5 * time.Second); len(b.List()) == 0 || b.List()[0].Waiting < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("three asks did not gather")
		}
	}
	if err := b.Answer("1", api.AnswerAlways, "ops"); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("a failed write: %v", err)
	}
	if b.List()[0].Waiting != 3 {
		t.Fatal("a failed always answered the requests")
	}
	fail = false
	if err := b.Answer("1", api.AnswerAlways, "ops"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if o := <-got; o.Answer != api.AnswerAlways {
			t.Fatalf("%+v", o)
		}
	}
	if len(wrote) != 1 || wrote[0] != "api.example.com by ops" {
		t.Fatalf("wrote %v", wrote)
	}
}

func TestAlwaysIsRefusedWhereNoLineWouldHelp(t *testing.T) {
	b := &Book{Wait: 10 * time.Second, Always: func(Request, string) error { t.Fatal("written"); return nil }}
	r := Request{Kind: "tool", Plugin: "files", Tool: "files__delete", Refusal: "deny *__delete (line 2)"}
	go b.Ask(context.Background(), r)
	waitFor(t, b, 1)
	if err := b.Answer("1", api.AnswerAlways, "ops"); err == nil || !strings.Contains(err.Error(), "deny *__delete (line 2)") {
		t.Fatalf("always over a deny line: %v", err)
	}
	if err := b.Answer("1", "maybe", "ops"); err == nil {
		t.Fatal("an answer that is no answer was taken")
	}
	b.Answer("1", api.AnswerDeny, "ops")
}

func TestUnansweredIsRefusedWhenTheWaitEnds(t *testing.T) {
	var end Outcome
	b := &Book{Wait: 80 * time.Millisecond, OnEnd: func(a api.Approval, o Outcome) { end = o }}
	start := time.Now()
	o := b.Ask(context.Background(), host)
	if o.Allowed() || o.Answer != "timeout" || time.Since(start) < 80*time.Millisecond || end.Answer != "timeout" {
		t.Fatalf("%+v after %v", o, time.Since(start))
	}
	if len(b.List()) != 0 {
		t.Fatal("a request whose wait ended is still listed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Wait = time.Hour
	go func() { waitFor(t, b, 1); cancel() }()
	if o := b.Ask(ctx, host); o.Answer != "cancelled" {
		t.Fatalf("a caller gone: %+v", o)
	}
}
