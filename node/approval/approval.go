// Package approval holds the requests that wait for an operator's answer
// (--approval-wait): an egress connection to a host a plugin's manifest names and
// the tenant's list does not, or a call of a tool the tenant's rules refuse. The
// same request asked again while one waits is one approval, asked more times. An
// operator answers with one word: allow once (the oldest waiting request goes
// through), allow always (the caller writes the tenant's file; every waiting
// request goes through), or deny; a request nobody answers is refused when its
// wait ends (docs/operators.md, "Approvals").
package approval

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"oz0.ai/node/node/api"
)

// Request is what waits.
type Request struct {
	Kind           string // "egress" or "tool"
	Plugin, Server string
	Tool           string // <plugin>__<tool> (tool)
	Host           string // egress
	Port           int
	// Reason is the manifest's reason for the host; Refusal what refuses the
	// request unless an operator allows it.
	Reason, Refusal string
	// Always: a line in the tenant's file would let it through.
	Always bool
}

func (r Request) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%s|%d", r.Kind, r.Plugin, r.Server, r.Tool, r.Host, r.Port)
}

// Outcome is how a wait ended.
type Outcome struct {
	Answer string // api.AnswerOnce, AnswerAlways, AnswerDeny, or "timeout" / "cancelled"
	By     string // who answered
	ID     string // the approval's id
}

// Allowed reports whether the request may go through.
func (o Outcome) Allowed() bool { return o.Answer == api.AnswerOnce || o.Answer == api.AnswerAlways }

// Book keeps the approvals waiting. Its methods are safe for concurrent use.
type Book struct {
	// Wait is how long a request waits for an answer.
	Wait time.Duration
	// Always makes "allow always" last: it writes the tenant's file. An error
	// leaves the request waiting and is the answer's error.
	Always func(r Request, by string) error
	// OnChange is told when the approvals waiting change (status).
	OnChange func()
	// OnEnd is told how each wait of an approval ended (the audit stream):
	// every answer, and every request refused at the end of its wait.
	OnEnd func(a api.Approval, o Outcome)
	// Now is the clock; tests fix it.
	Now func() time.Time

	mu    sync.Mutex
	next  int
	byKey map[string]*entry
	byID  map[string]*entry
}

type entry struct {
	id      string
	req     Request
	asked   int
	since   time.Time
	waiting []*waiter // oldest first
}

type waiter struct {
	until time.Time
	done  chan Outcome // buffered: an answer never blocks
}

// ErrUnknown: no approval waits under that id (answered, or its wait ended).
var ErrUnknown = errors.New("no request waits under that id (answered already, or its wait ended)")

func (b *Book) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// Ask waits for an operator's answer to r, at most Wait, or until ctx ends.
func (b *Book) Ask(ctx context.Context, r Request) Outcome {
	w := &waiter{until: b.now().Add(b.Wait), done: make(chan Outcome, 1)}
	b.mu.Lock()
	if b.byKey == nil {
		b.byKey, b.byID = map[string]*entry{}, map[string]*entry{}
	}
	e := b.byKey[r.key()]
	if e == nil {
		b.next++
		e = &entry{id: strconv.Itoa(b.next), req: r, since: b.now()}
		b.byKey[r.key()], b.byID[e.id] = e, e
	}
	e.req.Refusal, e.req.Always = r.Refusal, r.Always // as decided now
	e.asked++
	e.waiting = append(e.waiting, w)
	id := e.id
	b.mu.Unlock()
	b.changed()

	timer := time.NewTimer(b.Wait)
	defer timer.Stop()
	select {
	case o := <-w.done:
		return o
	case <-timer.C:
		return b.leave(e, w, Outcome{Answer: "timeout", ID: id})
	case <-ctx.Done():
		return b.leave(e, w, Outcome{Answer: "cancelled", ID: id})
	}
}

// leave takes a waiter off its approval (its wait ended unanswered); an answer
// that came meanwhile wins.
func (b *Book) leave(e *entry, w *waiter, o Outcome) Outcome {
	b.mu.Lock()
	i := -1
	for j, x := range e.waiting {
		if x == w {
			i = j
		}
	}
	if i < 0 {
		b.mu.Unlock()
		return <-w.done // answered while the wait was ending
	}
	e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
	a := b.view(e)
	if len(e.waiting) == 0 {
		b.drop(e)
	}
	b.mu.Unlock()
	if b.OnEnd != nil {
		b.OnEnd(a, o)
	}
	b.changed()
	return o
}

func (b *Book) drop(e *entry) {
	delete(b.byKey, e.req.key())
	delete(b.byID, e.id)
}

// Answer answers the approval id: api.AnswerOnce lets its oldest waiting request
// through, api.AnswerAlways (after Always has made it last) and api.AnswerDeny
// answer every one waiting.
func (b *Book) Answer(id, answer, by string) error {
	switch answer {
	case api.AnswerOnce, api.AnswerAlways, api.AnswerDeny:
	default:
		return fmt.Errorf("answer %q: must be %s, %s or %s", answer, api.AnswerOnce, api.AnswerAlways, api.AnswerDeny)
	}
	b.mu.Lock()
	e := b.byID[id]
	if e == nil {
		b.mu.Unlock()
		return fmt.Errorf("approval %s: %w", id, ErrUnknown)
	}
	req := e.req
	b.mu.Unlock()
	if answer == api.AnswerAlways {
		if !req.Always {
			return fmt.Errorf("approval %s: allow always cannot help: %s (allow it once, or change the rule)", id, req.Refusal)
		}
		if b.Always == nil {
			return fmt.Errorf("approval %s: allow always is not possible here", id)
		}
		if err := b.Always(req, by); err != nil {
			return fmt.Errorf("approval %s: %w", id, err)
		}
	}
	b.mu.Lock()
	if b.byID[id] != e || len(e.waiting) == 0 {
		b.mu.Unlock()
		return fmt.Errorf("approval %s: %w", id, ErrUnknown)
	}
	var release []*waiter
	if answer == api.AnswerOnce {
		release, e.waiting = e.waiting[:1], e.waiting[1:]
	} else {
		release, e.waiting = e.waiting, nil
	}
	a := b.view(e)
	if len(e.waiting) == 0 {
		b.drop(e)
	}
	b.mu.Unlock()
	o := Outcome{Answer: answer, By: by, ID: id}
	for _, w := range release {
		w.done <- o
	}
	if b.OnEnd != nil {
		b.OnEnd(a, o)
	}
	b.changed()
	return nil
}

// List is every approval waiting, oldest first.
func (b *Book) List() []api.Approval {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]api.Approval, 0, len(b.byID))
	for _, e := range b.byID {
		out = append(out, b.view(e))
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].ID)
		c, _ := strconv.Atoi(out[j].ID)
		return a < c
	})
	return out
}

// view is an entry as status shows it. b.mu is held.
func (b *Book) view(e *entry) api.Approval {
	r := e.req
	a := api.Approval{ID: e.id, Kind: r.Kind, Plugin: r.Plugin, Server: r.Server, Tool: r.Tool, Host: r.Host, Port: r.Port,
		Reason: r.Reason, Refusal: r.Refusal, Asked: e.asked, Waiting: len(e.waiting), Always: r.Always,
		Since: e.since.UTC().Format(time.RFC3339)}
	if len(e.waiting) > 0 {
		a.Expires = e.waiting[0].until.UTC().Format(time.RFC3339)
	}
	return a
}

func (b *Book) changed() {
	if b.OnChange != nil {
		b.OnChange()
	}
}
