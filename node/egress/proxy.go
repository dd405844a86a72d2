// Package egress is the node's egress proxy: the only network a strict sandbox has.
// One Proxy serves endpoints per plugin and per server (a unix socket bound into
// that plugin's or server's sandboxes, and/or a loopback TCP port for host-network
// modes); who speaks is known from the endpoint a connection arrived on, never from
// anything it sends — except that a loopback TCP port, which every local process can
// reach, also requires the endpoint's credential (credential.go). Each
// endpoint speaks HTTP CONNECT, absolute-form HTTP and SOCKS5 on the same port (the
// first byte tells them apart).
//
// A host is reached iff the plugin's manifest egress AND the tenant's list allow it;
// then every address dialled is checked at connect time against the SSRF guard
// (netrule.Forbidden and code.dny.dev/ssrf, both must pass; Config.AllowCIDRs
// opens ranges). Server-level egress lists narrow the plugin's only on an endpoint
// opened for that server (Listen.Server, which also names the server in audit
// lines); a plugin-wide endpoint cannot tell a plugin's servers apart, so its audit
// lines carry no server. The tenant list is watched live: a host taken off it loses
// new and open connections alike, as does a host dropped by UpdatePlugin.
//
// Use:
//
//	p, err := egress.New(egress.Config{TenantListPath: d.TenantList(), AuditPath: d.Audit()})
//	ep, err := p.AddPlugin(rules, egress.Listen{Socket: filepath.Join(d.EgressSocketDir(name), "egress.sock")})
//	err = p.UpdatePlugin(rules) // live
//	p.RemovePlugin(name)        // closes its endpoints and connections
//	p.Stats(name); p.Recent(20); p.Status(20); p.Findings(); p.Subscribe(64)
//	p.Close()
//
// Audit: one line of the node's audit stream (node/audit, kind "egress" with the
// api.EgressDecision fields) per event: "allow"
// when a connection or request is let through (with the address reached), "deny"
// with the list or guard that refused, "error" when an allowed target could not be
// reached, and "end" when an allowed connection finishes (bytes both ways and how
// long it was open; the rule says "revoked: …" when a rules change closed it).
// Lines reach the file as soon as the writer's queue drains and are fsynced once
// a second, not per line: a crash can lose the last second.
//
// The in-sandbox bridge (reexec helper sandbox.BridgeHelper) is in bridge.go.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
)

// Config configures a Proxy. Zero durations and limits take the defaults below.
type Config struct {
	// TenantListPath is the tenant's list (datadir.Dir.TenantList()).
	TenantListPath string
	// Audit is the node's audit stream, shared: every decision is a line of it.
	// Without it, AuditPath names a stream the proxy opens and closes itself
	// (datadir.Dir.Audit()); "" for none.
	Audit     *audit.Stream
	AuditPath string
	// AuditMaxBytes rotates the audit log at this size, keeping AuditKeep old
	// files (<path>.1 is the newest); defaults DefaultAuditMaxBytes, DefaultAuditKeep.
	AuditMaxBytes int64
	AuditKeep     int
	// AllowCIDRs are ranges the operator opened with --egress-allow-cidr; they
	// override the SSRF guard (never the lists).
	AllowCIDRs []netip.Prefix
	// Resolver turns a host name into addresses; default net.DefaultResolver.
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)
	Logger   *slog.Logger
	// Observe, if set, sees every decision (metrics); OnTenantReload each applied
	// change of the tenant list (ok: it parsed).
	Observe func(api.EgressDecision)
	// OnRefuse, if set, sees each connection turned away before any decision:
	// the plugin and the cause ("conn-cap", "credential").
	OnRefuse       func(plugin, cause string)
	OnTenantReload func(ok bool)
	// CA, when set, lets the proxy put secrets into TLS requests to the hosts they
	// are bound to (intercept.go); without it only plain HTTP gets them.
	CA *CA
	// UpstreamRoots verify the hosts the proxy speaks TLS to itself (intercepted
	// connections, absolute-form https); nil: the host's own roots.
	UpstreamRoots *x509.CertPool
	// Ask, if set, is asked about a connection that only the tenant's list
	// refuses, to a host the manifest allows (an operator's approval,
	// --approval-wait): the connection waits for its answer (ask.go).
	Ask func(ctx context.Context, q Question) Answer

	MaxConnsPerPlugin int           // open client connections per plugin; default 512
	MaxHeaderBytes    int           // request line + headers (and SOCKS handshake); default 64 KiB
	HeaderTimeout     time.Duration // to receive a request's headers; default 10 s
	IdleTimeout       time.Duration // between requests on a kept-alive connection; default 60 s
	DialTimeout       time.Duration // resolve + connect; default 10 s
	ResponseTimeout   time.Duration // upstream response headers (absolute-form HTTP); default 60 s
	KeepAlive         time.Duration // TCP keep-alive upstream; default 30 s
	PollInterval      time.Duration // tenant list stat poll behind fsnotify; default 1 s
	// PollOnly follows the tenant list by its stat every PollInterval alone, with no
	// inotify watch: closing a watch costs the kernel an SRCU grace period (~10 ms
	// here), which a short-lived process such as exec would pay at every exit.
	PollOnly bool
}

func (c *Config) defaults() {
	if c.Resolver == nil {
		c.Resolver = defaultResolver
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.AuditMaxBytes <= 0 {
		c.AuditMaxBytes = DefaultAuditMaxBytes
	}
	setInt(&c.AuditKeep, DefaultAuditKeep)
	setInt(&c.MaxConnsPerPlugin, 512)
	setInt(&c.MaxHeaderBytes, 64<<10)
	setDur(&c.HeaderTimeout, 10*time.Second)
	setDur(&c.IdleTimeout, 60*time.Second)
	setDur(&c.DialTimeout, 10*time.Second)
	setDur(&c.ResponseTimeout, 60*time.Second)
	setDur(&c.KeepAlive, 30*time.Second)
	setDur(&c.PollInterval, time.Second)
}

// Listen says where a plugin's endpoint listens.
type Listen struct {
	// Socket is a unix socket path (the node passes
	// datadir.EgressSocketDir(name)/egress.sock). Its folder is created 0711 and is
	// bound into that plugin's sandboxes only. "" for none.
	Socket string
	// SocketGroup, when > 0, is the plugin user's group: the socket is made 0660
	// in that group, so only the plugin's user and the node's can connect (its
	// path is known and, on a root node, its folders are traversable by every
	// user). 0 makes it 0600: only the node's user, as whom such a plugin runs.
	SocketGroup int
	// TCP also opens a listener on 127.0.0.1 with a free port (host-network modes:
	// auto, Seatbelt). Any local process can reach it, so it needs Credential.
	TCP bool
	// Credential is the secret the TCP listener requires (see Credential); it is
	// required with TCP and applies to nothing else of the endpoint.
	Credential string
	// Listener is a listener opened elsewhere, served as this endpoint and closed
	// with it: e.g. one opened inside a sandbox's network namespace (ListenInNetns,
	// Linux), which saves the bridge hop.
	Listener net.Listener
	// Server, when set, makes this endpoint that server's own: its server-level
	// egress list applies and audit lines name it. Give it a socket in a folder of
	// its own, or other servers of the plugin could use it.
	Server string
	// Netns, with Resolver, serves transparent egress (transparent.go) in the
	// sandbox's network namespace at this path (/proc/PID/ns/net; Linux): the
	// node's resolver answers on Resolver:53 there and listens on the addresses it
	// hands out. The sandbox's resolv.conf must name Resolver. A root node enters
	// the namespace itself; otherwise give Namespace.
	Netns    string
	Resolver netip.Addr
	// Namespace, when set, opens those sockets instead of the path (OpenNetns: on
	// a non-root node, through its helper). The caller closes it after the endpoint.
	Namespace *Netns
}

// Endpoint is where a plugin reaches the proxy.
type Endpoint struct {
	Plugin string
	Server string
	Socket string         // "" if none
	TCP    netip.AddrPort // zero if none
	id     uint64
}

// Stats are one plugin's counters.
type Stats struct {
	Allowed int64 // connections and requests let through
	Denied  int64 // refused by a list or the address guard
	Errors  int64 // allowed but unreachable
	Refused int64 // turned away at MaxConnsPerPlugin
	// AuthRefused were turned away for want of the endpoint's credential.
	AuthRefused int64
	Open        int64 // client connections open now
	Bytes       int64 // through allowed connections, both ways, once they end
	// LastDenials are the plugin's latest denials, newest first.
	LastDenials []api.EgressDecision
}

// Proxy is the node's egress proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	guard     *guard
	audit     *auditLog
	transport *http.Transport

	tenant   atomic.Pointer[tenantList]
	reloadMu sync.Mutex
	ca       atomic.Pointer[CA] // Config.CA, or one given later (UseCA)

	mu       sync.Mutex
	plugins  map[string]*plugin
	sessions map[*session]struct{}
	recent   ring
	subs     map[int]chan api.EgressDecision
	nextSub  int
	nextEP   uint64
	closed   bool
	nameCaps map[string]api.Finding // sandboxes that hit MaxTransparentNames, by plugin[/server]
	strays   map[string]*stray      // sentinels sent where their secret is not bound, by plugin[/server]

	done  chan struct{}
	wg    sync.WaitGroup // watcher and accept loops
	conns sync.WaitGroup // connection handlers
}

type plugin struct {
	name      string
	rules     atomic.Pointer[compiled]
	endpoints []*endpoint
	sem       chan struct{}
	removed   atomic.Bool

	allowed, denied, errors, refused, open, bytes atomic.Int64
	lastDenials                                   ring // under Proxy.mu
	handoffs                                      int  // listeners handed off by its sandboxes; under Proxy.mu
	// Clients refused for want of the credential, and when and at which count
	// that was last logged (see authRefused).
	authRefused, authLoggedAt, authLogged atomic.Int64
}

type endpoint struct {
	id     uint64
	plugin *plugin
	server string
	lns    []net.Listener
	socket string
	tcp    net.Listener // the host-loopback listener, which requires cred
	cred   *credential
	tr     atomic.Pointer[transparent] // the sandbox's resolver, if any
}

const (
	recentSize     = 256
	lastDenialSize = 10
)

// New loads the tenant list, opens the audit log and starts watching the list.
// The proxy runs until Close.
func New(cfg Config) (*Proxy, error) {
	cfg.defaults()
	if cfg.TenantListPath == "" {
		return nil, errors.New("egress proxy: no tenant list path")
	}
	for _, pr := range cfg.AllowCIDRs {
		if !pr.IsValid() {
			return nil, fmt.Errorf("egress proxy: invalid allowed range %v", pr)
		}
	}
	p := &Proxy{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "egress"),
		guard:    newGuard(cfg.AllowCIDRs),
		plugins:  map[string]*plugin{},
		sessions: map[*session]struct{}{},
		recent:   ring{max: recentSize},
		subs:     map[int]chan api.EgressDecision{},
		nameCaps: map[string]api.Finding{},
		strays:   map[string]*stray{},
		done:     make(chan struct{}),
	}
	p.transport = p.newTransport()
	if cfg.CA != nil {
		p.ca.Store(cfg.CA)
	}
	if cfg.Audit != nil {
		p.audit = &auditLog{s: cfg.Audit}
	} else if cfg.AuditPath != "" {
		a, err := openAudit(cfg.AuditPath, cfg.AuditMaxBytes, cfg.AuditKeep, p.log)
		if err != nil {
			return nil, err
		}
		p.audit = a
	}
	p.tenant.Store(readTenantList(cfg.TenantListPath))
	if tl := p.tenant.Load(); tl.err != nil {
		p.log.Error("tenant egress list unusable; denying all egress", "path", tl.path, "err", tl.err)
	}
	p.wg.Add(1)
	go p.watchTenant()
	return p, nil
}

// Close stops every endpoint, closes every connection, flushes the audit log and
// stops the watcher. It waits for all of the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	var eps []*endpoint
	for _, pl := range p.plugins {
		eps = append(eps, pl.endpoints...)
	}
	for s := range p.sessions {
		s.kill("proxy closed")
	}
	for id, ch := range p.subs {
		close(ch)
		delete(p.subs, id)
	}
	p.mu.Unlock()
	for _, ep := range eps {
		ep.close()
	}
	p.wg.Wait()
	p.conns.Wait()
	p.transport.CloseIdleConnections()
	p.audit.close()
	return nil
}

// UseCA gives the proxy the CA it terminates TLS with for the hosts secrets are
// bound to, when it was started without one (Config.CA).
func (p *Proxy) UseCA(ca *CA) { p.ca.CompareAndSwap(nil, ca) }

// AddPlugin sets a plugin's rules (replacing any) and opens an endpoint for it. A
// plugin may have several endpoints (e.g. a socket and a TCP port, or one per
// server); each call adds one.
func (p *Proxy) AddPlugin(r PluginRules, at Listen) (Endpoint, error) {
	c, err := compile(r)
	if err != nil {
		return Endpoint{}, err
	}
	if at.Socket == "" && !at.TCP && at.Listener == nil {
		return Endpoint{}, fmt.Errorf("plugin %s: egress endpoint needs a socket, TCP or a listener", r.Plugin)
	}
	if at.Netns != "" && !at.Resolver.IsValid() {
		return Endpoint{}, fmt.Errorf("plugin %s: transparent egress in %s needs a resolver address", r.Plugin, at.Netns)
	}
	var cred *credential
	if at.TCP {
		if cred, err = newCredential(at.Credential); err != nil {
			return Endpoint{}, fmt.Errorf("plugin %s: a host-loopback egress endpoint needs a credential: %w", r.Plugin, err)
		}
	}
	ep := &endpoint{server: at.Server, cred: cred}
	if at.Listener != nil {
		ep.lns = append(ep.lns, at.Listener)
	}
	out := Endpoint{Plugin: r.Plugin, Server: at.Server}
	if at.Socket != "" && p.socketInUse(at.Socket) {
		ep.close()
		return Endpoint{}, fmt.Errorf("plugin %s: egress socket %s is already an endpoint", r.Plugin, at.Socket)
	}
	if at.Socket != "" {
		ln, err := listenUnix(at.Socket, at.SocketGroup)
		if err != nil {
			ep.close()
			return Endpoint{}, fmt.Errorf("plugin %s: %w", r.Plugin, err)
		}
		ep.lns, ep.socket, out.Socket = append(ep.lns, ln), at.Socket, at.Socket
	}
	if at.TCP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ep.close()
			return Endpoint{}, fmt.Errorf("plugin %s: egress TCP endpoint: %w", r.Plugin, err)
		}
		ep.lns, ep.tcp = append(ep.lns, ln), ln
		out.TCP = ln.Addr().(*net.TCPAddr).AddrPort()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ep.close()
		return Endpoint{}, errors.New("egress proxy: closed")
	}
	pl := p.plugins[r.Plugin]
	if pl == nil {
		pl = &plugin{name: r.Plugin, sem: make(chan struct{}, p.cfg.MaxConnsPerPlugin), lastDenials: ring{max: lastDenialSize}}
		p.plugins[r.Plugin] = pl
	}
	pl.rules.Store(c)
	ep.plugin = pl
	p.nextEP++
	ep.id, out.id = p.nextEP, p.nextEP
	pl.endpoints = append(pl.endpoints, ep)
	for _, ln := range ep.lns {
		var need *credential
		if ln == ep.tcp {
			need = ep.cred
		}
		p.wg.Add(1)
		go p.accept(ep, ln, need, p.serveConn)
	}
	p.mu.Unlock()
	if at.Netns != "" || at.Namespace != nil {
		open := netnsOpenerFor(at.Netns)
		if at.Namespace != nil {
			open = at.Namespace.opener()
		}
		tr, err := p.startTransparent(ep, open, at.Resolver)
		if err != nil {
			p.CloseEndpoint(out)
			return Endpoint{}, fmt.Errorf("plugin %s: %w", r.Plugin, err)
		}
		ep.tr.Store(tr)
		if p.endpointGone(ep) {
			ep.close()
		}
	}
	p.revoke("plugin " + r.Plugin + " rules set")
	p.log.Info("egress endpoint open", "plugin", r.Plugin, "server", at.Server, "socket", out.Socket, "tcp", out.TCP,
		"listener", listenerText(at.Listener))
	return out, nil
}

func (p *Proxy) socketInUse(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pl := range p.plugins {
		for _, ep := range pl.endpoints {
			if ep.socket != "" && filepath.Clean(ep.socket) == filepath.Clean(path) {
				return true
			}
		}
	}
	return false
}

// listenerText names a listener opened elsewhere (e.g. inside a sandbox's network
// namespace) for the log; "" when there is none.
func listenerText(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String() + " (opened by the caller, e.g. inside a sandbox's network namespace)"
}

// UpdatePlugin replaces a plugin's rules; they apply to the next request, and open
// connections the new rules no longer allow are closed.
func (p *Proxy) UpdatePlugin(r PluginRules) error {
	c, err := compile(r)
	if err != nil {
		return err
	}
	p.mu.Lock()
	pl := p.plugins[r.Plugin]
	if pl != nil {
		pl.rules.Store(c)
	}
	p.mu.Unlock()
	if pl == nil {
		return fmt.Errorf("egress: plugin %s has no endpoint", r.Plugin)
	}
	p.revoke("plugin " + r.Plugin + " rules changed")
	return nil
}

// RemovePlugin closes a plugin's endpoints (removing its sockets) and every
// connection it has open. Its counters are forgotten.
func (p *Proxy) RemovePlugin(name string) {
	p.mu.Lock()
	pl := p.plugins[name]
	delete(p.plugins, name)
	for subject := range p.nameCaps {
		if subject == name || strings.HasPrefix(subject, name+"/") {
			delete(p.nameCaps, subject)
		}
	}
	for subject := range p.strays {
		if subject == name || strings.HasPrefix(subject, name+"/") {
			delete(p.strays, subject)
		}
	}
	if pl != nil {
		pl.removed.Store(true)
		for s := range p.sessions {
			if s.plugin == pl {
				s.kill("plugin removed")
			}
		}
	}
	p.mu.Unlock()
	if pl != nil {
		for _, ep := range pl.endpoints {
			ep.close()
		}
	}
}

// CloseEndpoint closes one endpoint of a plugin (e.g. the listener opened in a
// sandbox that has ended). Connections it accepted stay until they end; the
// plugin's rules and other endpoints are kept.
func (p *Proxy) CloseEndpoint(e Endpoint) {
	p.mu.Lock()
	var found *endpoint
	if pl := p.plugins[e.Plugin]; pl != nil {
		for i, ep := range pl.endpoints {
			if ep.id == e.id {
				found = ep
				pl.endpoints = append(pl.endpoints[:i:i], pl.endpoints[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	if found != nil {
		found.close()
	}
}

// Stats returns a plugin's counters; false if the plugin has no endpoint.
func (p *Proxy) Stats(name string) (Stats, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.plugins[name]
	if pl == nil {
		return Stats{}, false
	}
	return Stats{
		Allowed: pl.allowed.Load(), Denied: pl.denied.Load(), Errors: pl.errors.Load(),
		Refused: pl.refused.Load(), AuthRefused: pl.authRefused.Load(), Open: pl.open.Load(), Bytes: pl.bytes.Load(),
		LastDenials: pl.lastDenials.newest(lastDenialSize),
	}, true
}

// Recent returns up to n of the latest allow/deny decisions, newest first.
func (p *Proxy) Recent(n int) []api.EgressDecision {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recent.newest(n)
}

// Status is the proxy's part of the status model.
func (p *Proxy) Status(recent int) api.EgressStatus {
	tl := p.tenant.Load()
	st := api.EgressStatus{TenantList: tl.path, TenantOK: tl.err == nil, Recent: p.Recent(recent)}
	for _, pat := range tl.patterns {
		st.Patterns = append(st.Patterns, pat.String())
	}
	return st
}

// Findings are the proxy's current findings: a tenant list that cannot be used,
// sandboxes that asked for more names than they may have addresses for.
func (p *Proxy) Findings() []api.Finding {
	p.mu.Lock()
	var out []api.Finding
	for _, f := range p.nameCaps {
		out = append(out, f)
	}
	for _, st := range p.strays {
		out = append(out, st.finding())
	}
	for name, pl := range p.plugins {
		if n := pl.refused.Load(); n > 0 {
			out = append(out, api.Finding{Code: api.CodeEgressConnCap, Severity: api.SevWarning, Subject: name,
				Message: fmt.Sprintf("plugin %s opened more than %d egress connections at once; %d were closed unanswered", name, p.cfg.MaxConnsPerPlugin, n),
				Fix:     "find what in the plugin opens connections without closing them"})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b api.Finding) int { return strings.Compare(a.Subject, b.Subject) })
	tl := p.tenant.Load()
	if tl.err == nil {
		return out
	}
	return append(out, api.Finding{
		Code:     api.CodeTenantListUnreadable,
		Severity: api.SevCritical,
		Subject:  tl.path,
		Message:  "the tenant's egress list cannot be used, so the proxy denies all egress: " + tl.err.Error(),
		Fix:      "fix or remove the named line in " + tl.path + "; the proxy picks the change up within a second",
		Time:     tl.read.UTC().Format(time.RFC3339),
	})
}

// Subscribe returns a channel of allow/deny decisions as they happen (the control
// API's event stream) and a function to stop. A subscriber that does not keep up
// misses decisions rather than slowing the proxy; the channel is closed by the
// stop function or Close.
func (p *Proxy) Subscribe(buf int) (<-chan api.EgressDecision, func()) {
	ch := make(chan api.EgressDecision, max(buf, 1))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		close(ch)
		return ch, func() {}
	}
	id := p.nextSub
	p.nextSub++
	p.subs[id] = ch
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if c, ok := p.subs[id]; ok {
			close(c)
			delete(p.subs, id)
		}
	}
}

// record counts, keeps and audits one decision.
func (p *Proxy) record(s *session, t Target, decision, addr, rule string, bytes int64) {
	now := time.Now()
	d := api.EgressDecision{
		Time: now.UTC().Format(time.RFC3339Nano), Plugin: s.plugin.name, Server: s.server,
		Host: t.Host, Port: t.Port, Addr: addr, Decision: decision, Rule: rule, Bytes: bytes,
	}
	s.mu.Lock()
	switch decision {
	case "allow":
		s.opened = now
	case "end":
		if !s.opened.IsZero() {
			d.Seconds = now.Sub(s.opened).Seconds()
			s.opened = time.Time{}
		}
	}
	s.mu.Unlock()
	pl := s.plugin
	if p.cfg.Observe != nil {
		p.cfg.Observe(d)
	}
	switch decision {
	case "allow":
		pl.allowed.Add(1)
	case "deny":
		pl.denied.Add(1)
	case "error":
		pl.errors.Add(1)
	case "end":
		pl.bytes.Add(bytes)
	}
	if decision == "allow" || decision == "deny" || decision == "secret" {
		p.mu.Lock()
		p.recent.add(d)
		if decision == "deny" {
			pl.lastDenials.add(d)
		}
		for _, ch := range p.subs {
			select {
			case ch <- d:
			default:
			}
		}
		p.mu.Unlock()
	}
	if decision == "deny" {
		p.log.Info("egress denied", "plugin", d.Plugin, "server", d.Server, "host", d.Host, "port", d.Port, "addr", addr, "rule", rule)
	}
	p.audit.add(d)
}

// ring keeps the latest decisions.
type ring struct {
	max  int
	buf  []api.EgressDecision
	next int
}

func (r *ring) add(d api.EgressDecision) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, d)
		return
	}
	r.buf[r.next] = d
	r.next = (r.next + 1) % r.max
}

func (r *ring) newest(n int) []api.EgressDecision {
	if n > len(r.buf) {
		n = len(r.buf)
	}
	out := make([]api.EgressDecision, 0, n)
	for i := 0; i < n; i++ {
		j := (r.next - 1 - i + 2*len(r.buf)) % len(r.buf)
		if len(r.buf) < r.max {
			j = len(r.buf) - 1 - i
		}
		out = append(out, r.buf[j])
	}
	return out
}

func listenUnix(path string, group int) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress socket folder %s: %w", dir, err)
	}
	// 0711: the plugin's uid can reach the socket by name but not list the folder.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("egress socket folder %s: %w", dir, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("egress socket %s: remove stale: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress socket %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	// Connecting takes write permission on the socket: only the node's user and,
	// with a group, the plugin's user may. The group is given while the socket is
	// still 0600, so no other user ever finds it open.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress socket %s: %w", path, err)
	}
	if group > 0 {
		if err := os.Lchown(path, -1, group); err != nil {
			ln.Close()
			return nil, fmt.Errorf("egress socket %s: group %d: %w", path, group, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("egress socket %s: %w", path, err)
		}
	}
	return ln, nil
}

func (ep *endpoint) close() {
	for _, ln := range ep.lns {
		ln.Close()
	}
	if tr := ep.tr.Swap(nil); tr != nil {
		tr.close()
	}
}

// endpointGone reports whether ep was closed or dropped (its plugin removed, the
// proxy closed) while it was being set up.
func (p *Proxy) endpointGone(ep *endpoint) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed || ep.plugin.removed.Load() || !slices.Contains(ep.plugin.endpoints, ep)
}

// startAccept serves ln as one of ep's listeners with serve; false when the proxy
// is closed (the caller closes ln).
func (p *Proxy) startAccept(ep *endpoint, ln net.Listener, serve func(*session)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || ep.plugin.removed.Load() {
		return false
	}
	p.wg.Add(1)
	go p.accept(ep, ln, nil, serve)
	return true
}

// accept serves one listener until it is closed. With cred, every client must
// present it (a host-loopback listener); nil means the listener's place is proof
// enough (a socket bound into the plugin's sandboxes, a listener inside one).
func (p *Proxy) accept(ep *endpoint, ln net.Listener, cred *credential, serve func(*session)) {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress accept", "plugin", ep.plugin.name, "err", err)
			select {
			case <-time.After(backoff):
				continue
			case <-p.done:
				return
			}
		}
		backoff = 0
		pl := ep.plugin
		select {
		case pl.sem <- struct{}{}:
		default:
			pl.refused.Add(1)
			c.Close()
			if p.cfg.OnRefuse != nil {
				p.cfg.OnRefuse(pl.name, "conn-cap")
			}
			continue
		}
		s := &session{plugin: pl, server: ep.server, ep: ep, conn: c, cred: cred}
		p.mu.Lock()
		if p.closed || pl.removed.Load() {
			p.mu.Unlock()
			<-pl.sem
			c.Close()
			continue
		}
		p.sessions[s] = struct{}{}
		p.conns.Add(1)
		p.mu.Unlock()
		pl.open.Add(1)
		go func() {
			defer func() {
				s.kill("")
				p.mu.Lock()
				delete(p.sessions, s)
				p.mu.Unlock()
				pl.open.Add(-1)
				<-pl.sem
				p.conns.Done()
			}()
			serve(s)
		}()
	}
}

// session is one client connection. Once a target is allowed it is registered so
// that a change of rules can close it.
type session struct {
	plugin *plugin
	server string
	ep     *endpoint // the endpoint it arrived on
	conn   net.Conn
	cred   *credential // what the client must present; nil: nothing

	mu     sync.Mutex
	target *Target
	up     net.Conn
	cancel context.CancelFunc
	killed string // why, once killed
	isDead bool
	opened time.Time // when its connection was allowed (an end line's duration)
	// approved: an operator let its connection through although the tenant's
	// list does not name the host; a change of that list does not close it.
	approved bool
}

// setTarget marks what the session is (about to be) connected to. It must be set
// before the decision is taken: a rules change in between then sees it.
func (s *session) setTarget(t *Target, cancel context.CancelFunc) {
	s.mu.Lock()
	s.target, s.cancel = t, cancel
	s.mu.Unlock()
}

// attach hands the session its upstream connection; false if it was killed meanwhile.
func (s *session) attach(up net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isDead {
		return false
	}
	s.up = up
	return true
}

func (s *session) kill(why string) {
	s.mu.Lock()
	if s.isDead {
		s.mu.Unlock()
		return
	}
	s.isDead, s.killed = true, why
	up, cancel := s.up, s.cancel
	s.mu.Unlock()
	s.conn.Close()
	if up != nil {
		up.Close()
	}
	if cancel != nil {
		cancel()
	}
}

func (s *session) killedWhy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}

// revoke closes every session whose target the current rules no longer allow.
func (p *Proxy) revoke(why string) {
	tl := p.tenant.Load()
	p.mu.Lock()
	var victims []*session
	for s := range p.sessions {
		s.mu.Lock()
		t := s.target
		s.mu.Unlock()
		if t == nil {
			continue
		}
		if v := decide(s.plugin.rules.Load(), s.server, tl, *t, p.guard.operatorAllows); !v.allow && !(v.askable && s.isApproved()) {
			victims = append(victims, s)
		}
	}
	p.mu.Unlock()
	for _, s := range victims {
		p.log.Info("egress connection closed: no longer allowed", "plugin", s.plugin.name, "server", s.server, "why", why)
		s.kill("revoked: " + why)
	}
}
