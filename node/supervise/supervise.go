// Package supervise keeps each started server alive: a state machine per server
// (starting, running, backing-off, crashed, stopped), restart on exit with
// exponential back-off and jitter, a crash-loop finding carrying the last stderr
// lines, and stderr kept in memory and in logs/.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"oz0.ai/node/node/api"
)

// Session is a started server: Wait returns when it ends; Close ends it.
type Session interface {
	Wait() error
	Close() error
}

// Interrupter is a Session that can end its calls in flight at once. Ending a
// session otherwise waits for them, and a server that never answers would keep
// its old process and its callers waiting for good.
type Interrupter interface {
	Interrupt(cause error)
}

// Liveness is a Session whose server the supervisor can check is still there:
// Busy says whether the node awaits an answer from it (a call in flight), Ping
// asks it to answer now (MCP ping) and returns its answer or ctx's end.
type Liveness interface {
	Busy() bool
	Ping(ctx context.Context) error
}

// Killer is a Session that can be ended at once, without the grace a stop
// gives: one that failed its liveness check answers nothing, so waiting for it
// to exit by itself only delays its restart.
type Killer interface {
	Kill()
}

// StartFunc starts one instance of a server, its stderr going to stderr. It returns
// once the server is up (for MCP servers: initialized).
type StartFunc func(ctx context.Context, stderr io.Writer) (Session, error)

// Unit is one supervised server.
type Unit struct {
	Plugin string
	Server string
	Start  StartFunc
	// UpState is the state shown while it runs: running, exempt-running or
	// unsandboxed-running.
	UpState string
	// Up is called after each successful start and Down after each end; both may
	// be nil. The gateway registers and removes the server's tools there.
	Up   func(Session)
	Down func()
}

// Key names a unit.
func (u *Unit) Key() string { return u.Plugin + "/" + u.Server }

// Options tune the supervisor.
type Options struct {
	MinBackoff, MaxBackoff time.Duration
	// CrashLoop crashes within CrashWindow raise a crash-loop finding.
	CrashLoop   int
	CrashWindow time.Duration
	// StableAfter is how long a run must last for the back-off to reset.
	StableAfter time.Duration
	RingLines   int
	LogDir      string
	// LogMaxBytes and LogFiles bound each server's log on disk (rotated by size);
	// a server writing more than FloodBytes a second has the excess dropped and
	// raises a log-flood finding. Zero means the defaults (4 MiB, 4 files, 1 MiB).
	LogMaxBytes int64
	LogFiles    int
	FloodBytes  int64
	// OnChange is called (without locks held) after every state change.
	OnChange func(api.ServerEvent)
	// OnFinding is called when a crash loop, a log flood or an unresponsive
	// server is detected.
	OnFinding func(api.Finding)
	Now       func() time.Time
	// PingEvery is how often a running server that implements Liveness and is
	// idle (no call in flight) is pinged; PingTimeout is how long it has to
	// answer before it is reported unresponsive and restarted. PingEvery 0
	// checks no server on a schedule (Check still does).
	PingEvery   time.Duration
	PingTimeout time.Duration
}

func (o *Options) defaults() {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.CrashLoop <= 0 {
		o.CrashLoop = 5
	}
	if o.CrashWindow <= 0 {
		o.CrashWindow = 2 * time.Minute
	}
	if o.StableAfter <= 0 {
		o.StableAfter = 30 * time.Second
	}
	if o.RingLines <= 0 {
		o.RingLines = 200
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = 10 * time.Second
	}
}

// Status is a unit's current state.
type Status struct {
	Plugin, Server string
	State          string
	Restarts       int
	Since          time.Time
	LastErr        string
	// LogDropped is how many bytes of its output were dropped (floods).
	LogDropped int64
	// OperatorRestarts counts the restarts the operator asked for (not in
	// Restarts, which counts the ends the node did not ask for).
	OperatorRestarts int
	// LastRestart says why the server last started again and when.
	LastRestart string
}

type running struct {
	unit    *Unit
	ring    *Ring
	cancel  context.CancelFunc
	done    chan struct{}
	restart chan struct{}
	check   chan struct{} // a liveness check asked for now (Check)
	mu      sync.Mutex
	state   string
	// restarts count the ends the node did not ask for; operator the restarts
	// the operator asked for; lastRestart says why and when the last one was.
	restarts    int
	operator    int
	lastRestart string
	since       time.Time
	lastErr     string
	crashes     []time.Time
}

// Supervisor runs units.
type Supervisor struct {
	opts  Options
	mu    sync.Mutex
	units map[string]*running
}

// New returns a supervisor.
func New(opts Options) *Supervisor {
	opts.defaults()
	return &Supervisor{opts: opts, units: map[string]*running{}}
}

var errOperatorRestart = errors.New("restarted by the operator")

// errUnresponsive marks an end the liveness check made.
var errUnresponsive = errors.New("unresponsive")

// ErrUnknown is returned for a unit that is not supervised.
var ErrUnknown = errors.New("no such server")

// Add starts supervising u. A unit with the same key is stopped first.
func (s *Supervisor) Add(ctx context.Context, u *Unit) {
	s.Remove(u.Key())
	logPath := ""
	if s.opts.LogDir != "" {
		logPath = filepath.Join(s.opts.LogDir, safeName(u.Plugin)+"."+safeName(u.Server)+".log")
	}
	cctx, cancel := context.WithCancel(ctx)
	lo := LogOptions{Path: logPath, MaxBytes: s.opts.LogMaxBytes, Files: s.opts.LogFiles, FloodBytes: s.opts.FloodBytes, Now: s.opts.Now}
	lo.OnFlood = func(dropped int64) { s.flood(u, lo, dropped) }
	r := &running{unit: u, ring: NewRing(s.opts.RingLines, lo), cancel: cancel,
		done: make(chan struct{}), restart: make(chan struct{}, 1), check: make(chan struct{}, 1), state: api.StateStarting, since: s.opts.Now()}
	s.mu.Lock()
	s.units[u.Key()] = r
	s.mu.Unlock()
	go s.loop(cctx, r)
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '\n' {
			return '_'
		}
		return r
	}, s)
}

// Remove stops a unit and waits for it to end.
func (s *Supervisor) Remove(key string) {
	s.mu.Lock()
	r := s.units[key]
	delete(s.units, key)
	s.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
		r.ring.Close()
	}
}

// StopAll stops every unit and waits for them.
func (s *Supervisor) StopAll() {
	s.mu.Lock()
	keys := make([]string, 0, len(s.units))
	for k := range s.units {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() { defer wg.Done(); s.Remove(k) }()
	}
	wg.Wait()
}

// Restart ends the unit's current instance; the loop starts a new one at once.
func (s *Supervisor) Restart(key string) error {
	s.mu.Lock()
	r := s.units[key]
	s.mu.Unlock()
	if r == nil {
		return fmt.Errorf("restart %s: %w", key, ErrUnknown)
	}
	select {
	case r.restart <- struct{}{}:
	default:
	}
	return nil
}

// Check asks for a liveness check of the unit's running instance now, busy or
// not (a call to it ran out of time): one that does not answer within
// PingTimeout is reported unresponsive and restarted.
func (s *Supervisor) Check(key string) {
	s.mu.Lock()
	r := s.units[key]
	s.mu.Unlock()
	if r == nil {
		return
	}
	select {
	case r.check <- struct{}{}:
	default:
	}
}

// Logs returns the last n stderr lines of a unit.
func (s *Supervisor) Logs(key string, n int) ([]string, error) {
	s.mu.Lock()
	r := s.units[key]
	s.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("logs of %s: %w", key, ErrUnknown)
	}
	return r.ring.Lines(n), nil
}

// Follow streams new stderr lines of a unit.
func (s *Supervisor) Follow(key string) (<-chan string, func(), error) {
	s.mu.Lock()
	r := s.units[key]
	s.mu.Unlock()
	if r == nil {
		return nil, nil, fmt.Errorf("follow %s: %w", key, ErrUnknown)
	}
	c, cancel := r.ring.Follow()
	return c, cancel, nil
}

// Status returns every unit's state.
func (s *Supervisor) Status() map[string]Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Status, len(s.units))
	for k, r := range s.units {
		r.mu.Lock()
		out[k] = Status{Plugin: r.unit.Plugin, Server: r.unit.Server, State: r.state, Restarts: r.restarts, Since: r.since, LastErr: r.lastErr,
			OperatorRestarts: r.operator, LastRestart: r.lastRestart}
		r.mu.Unlock()
		st := out[k]
		st.LogDropped, _ = r.ring.Dropped()
		out[k] = st
	}
	return out
}

func (s *Supervisor) set(r *running, state, detail string) {
	r.mu.Lock()
	r.state = state
	r.since = s.opts.Now()
	// What went wrong is kept; what the node is doing (starting, restarting) is not.
	if detail != "" && state != r.unit.UpState && state != api.StateStarting {
		r.lastErr = detail
	}
	r.mu.Unlock()
	if s.opts.OnChange != nil {
		s.opts.OnChange(api.ServerEvent{Plugin: r.unit.Plugin, Server: r.unit.Server, State: state, Detail: detail})
	}
}

func (s *Supervisor) loop(ctx context.Context, r *running) {
	defer close(r.done)
	backoff := s.opts.MinBackoff
	for {
		s.set(r, api.StateStarting, "")
		started := s.opts.Now()
		sess, err := r.unit.Start(ctx, r.ring)
		var exitErr error
		if err == nil {
			// Tools are attached before the state says running, so a caller that
			// waits for "running" finds them.
			if r.unit.Up != nil {
				r.unit.Up(sess)
			}
			s.set(r, r.unit.UpState, "")
			exitErr = s.serve(ctx, r, sess)
		} else {
			exitErr = err
		}
		if ctx.Err() != nil {
			s.set(r, api.StateStopped, "")
			return
		}
		if errors.Is(exitErr, errOperatorRestart) {
			s.operatorRestart(r)
			continue // not a crash: no count, no back-off
		}
		detail := "exited"
		if exitErr != nil {
			detail = exitErr.Error()
		}
		now := s.opts.Now()
		if now.Sub(started) >= s.opts.StableAfter {
			backoff = s.opts.MinBackoff
		}
		r.mu.Lock()
		r.restarts++
		r.lastRestart = detail + " (at " + now.UTC().Format(time.RFC3339) + ")"
		r.crashes = append(r.crashes, now)
		cut := 0
		for cut < len(r.crashes) && now.Sub(r.crashes[cut]) > s.opts.CrashWindow {
			cut++
		}
		r.crashes = r.crashes[cut:]
		loop := len(r.crashes) >= s.opts.CrashLoop
		if loop {
			r.crashes = nil // one finding per loop episode
		}
		r.mu.Unlock()
		state := api.StateCrashed
		if errors.Is(exitErr, errUnresponsive) {
			state = api.StateUnresponsive
		}
		s.set(r, state, detail)
		if loop && s.opts.OnFinding != nil {
			last := r.ring.Lines(5)
			s.opts.OnFinding(api.Finding{
				Code: api.CodeCrashLoop, Severity: api.SevError, Subject: r.unit.Key(),
				Message: fmt.Sprintf("server %s crashed %d times within %s (last: %s); last stderr: %s",
					r.unit.Key(), s.opts.CrashLoop, s.opts.CrashWindow, detail, strings.Join(last, " | ")),
				Fix: fmt.Sprintf("read its log (oz0-node status, or logs/%s.%s.log) and fix or remove the plugin", r.unit.Plugin, r.unit.Server),
			})
		}
		wait := jitter(backoff)
		s.set(r, api.StateBackingOff, fmt.Sprintf("restarting in %s after: %s", wait.Round(time.Millisecond), detail))
		select {
		case <-time.After(wait):
		case <-r.restart:
			s.operatorRestart(r)
		case <-ctx.Done():
			s.set(r, api.StateStopped, "")
			return
		}
		backoff *= 2
		if backoff > s.opts.MaxBackoff {
			backoff = s.opts.MaxBackoff
		}
	}
}

// operatorRestart counts a restart the operator asked for and says so.
func (s *Supervisor) operatorRestart(r *running) {
	r.mu.Lock()
	r.operator++
	r.lastRestart = "the operator asked (oz0-node restart) at " + s.opts.Now().UTC().Format(time.RFC3339)
	r.mu.Unlock()
}

// serve waits while one started instance runs: until it ends, the node stops it,
// the operator restarts it, or it fails a liveness check. Before it returns, the
// instance's calls in flight are ended with the reason and it is closed. It
// returns why the instance ended.
func (s *Supervisor) serve(ctx context.Context, r *running, sess Session) error {
	waitDone := make(chan error, 1)
	go func() { waitDone <- sess.Wait() }()
	lv, _ := sess.(Liveness)
	var tick <-chan time.Time
	if lv != nil && s.opts.PingEvery > 0 {
		t := time.NewTicker(s.opts.PingEvery)
		defer t.Stop()
		tick = t.C
	}
	var pinged chan error // the one ping in flight, if any
	ping := func() {
		if lv == nil || pinged != nil {
			return
		}
		pinged = make(chan error, 1)
		go func(c chan error) {
			pctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
			defer cancel()
			c <- lv.Ping(pctx)
		}(pinged)
	}
	var exitErr, cause error
	for ended := false; !ended && exitErr == nil && cause == nil; {
		select {
		case exitErr = <-waitDone:
			ended = true // nil: it exited cleanly
		case <-ctx.Done():
			cause = fmt.Errorf("server %s was stopped while this call was in flight", r.unit.Key())
		case <-r.restart:
			exitErr = errOperatorRestart
			cause = fmt.Errorf("server %s was restarted by the operator while this call was in flight", r.unit.Key())
			// Say what is true while the old instance stops: it no longer serves.
			s.set(r, api.StateStarting, "restarting: stopping the old instance (the operator asked)")
		case <-tick:
			if !lv.Busy() {
				ping()
			}
		case <-r.check:
			ping()
		case err := <-pinged:
			pinged = nil
			if err == nil || ctx.Err() != nil {
				continue
			}
			why := fmt.Sprintf("server %s is unresponsive: it did not answer a ping within %s (%v)", r.unit.Key(), s.opts.PingTimeout, err)
			exitErr = fmt.Errorf("%w: it did not answer a ping within %s", errUnresponsive, s.opts.PingTimeout)
			cause = errors.New(why + "; it is being restarted")
			s.set(r, api.StateUnresponsive, why)
			s.unresponsive(r, why)
		}
	}
	if in, ok := sess.(Interrupter); ok && cause != nil {
		in.Interrupt(cause)
	}
	if r.unit.Down != nil {
		r.unit.Down()
	}
	if k, ok := sess.(Killer); ok && errors.Is(exitErr, errUnresponsive) {
		k.Kill()
	}
	sess.Close()
	return exitErr
}

// unresponsive raises the finding for a server that failed its liveness check,
// with its last stderr lines.
func (s *Supervisor) unresponsive(r *running, why string) {
	if s.opts.OnFinding == nil {
		return
	}
	last := r.ring.Lines(5)
	msg := why
	if len(last) > 0 {
		msg += "; last stderr: " + strings.Join(last, " | ")
	}
	s.opts.OnFinding(api.Finding{
		Code: api.CodeUnresponsive, Severity: api.SevError, Subject: r.unit.Key(), Message: msg,
		Fix: fmt.Sprintf("the node restarts it; if it keeps happening read its log (logs/%s.%s.log) and fix or remove the plugin, or raise --server-ping-timeout for a server that answers slowly", r.unit.Plugin, r.unit.Server),
	})
}

// flood raises the finding for a server whose output outruns its log budget.
func (s *Supervisor) flood(u *Unit, lo LogOptions, dropped int64) {
	if s.opts.OnFinding == nil {
		return
	}
	lo.defaults()
	s.opts.OnFinding(api.Finding{
		Code: api.CodeLogFlood, Severity: api.SevWarning, Subject: u.Key(),
		Message: fmt.Sprintf("server %s writes more than %d bytes of stderr within %s: the excess is dropped (%d bytes so far); its log is kept to %d files of %d bytes",
			u.Key(), lo.FloodBytes, lo.FloodWindow, dropped, lo.Files, lo.MaxBytes),
		Fix: fmt.Sprintf("fix or remove the plugin; its log is logs/%s.%s.log", u.Plugin, u.Server),
	})
}

// jitter spreads restarts by ±20 % so many crashing servers do not restart in step.
func jitter(d time.Duration) time.Duration {
	f := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * f)
}
