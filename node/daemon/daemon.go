// Package daemon is the running node: it plans every installed plugin, starts the
// servers the policy allows under the supervisor, attaches them to the MCP gateway,
// serves the control API and MCP on sockets under <data>/run, and keeps status.json
// and health.json current. It is OS-neutral: backends come in through Config.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/approval"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/commands"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/conncap"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/launch"
	"oz0.ai/node/node/logring"
	"oz0.ai/node/node/mcpdoor"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/peer"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/serverconn"
	"oz0.ai/node/node/supervise"
)

// Egress is the node's egress proxy as the daemon uses it.
type Egress interface {
	// Set sets a plugin's lists and secrets (live) and makes its endpoints
	// exactly eps (egress.Endpoints.Set).
	Set(rules egress.PluginRules, eps []egress.Want) error
	// Endpoint is the host-loopback port of a plugin's endpoint (server "" for
	// its own) and the credential it requires; port 0 when it has none.
	Endpoint(plugin, server string) (port int, credential string)
	RemovePlugin(plugin string)
	Counts(plugin string) (allowed, denied int64)
	// Refusals counts the connections turned away before any decision, by cause.
	Refusals(plugin string) map[string]int64
	Recent(n int) []api.EgressDecision
	// Tenant returns the tenant list's patterns as loaded and whether it loaded.
	Tenant() (patterns []string, ok bool)
	Findings() []api.Finding
	// Subscribe streams decisions for the event stream.
	Subscribe() (<-chan api.EgressDecision, func())
	// ListenIn serves the endpoint of a plugin's server ("" for the plugin's own) on
	// addr inside a sandbox's network namespace (a /proc/PID/ns/net path); detach
	// closes it. Unsupported: an error.
	ListenIn(plugin, server, netnsPath, addr string) (detach func(), err error)
}

// Config wires a daemon.
type Config struct {
	Node      *plan.Node
	Backends  map[string]sandbox.Backend // by name; "none" runs unsandboxed
	Egress    Egress                     // nil: no proxy (sandboxes get no network)
	Logger    *slog.Logger
	Version   string
	Supervise supervise.Options
	// NodeFindings are raised at start (probe results, tier 0, plugin users off).
	NodeFindings []api.Finding
	Probes       []api.BackendProbe
	// MCPListen optionally serves MCP over HTTP on a loopback address with a bearer
	// token; Token is that token.
	MCPListen string
	Token     string
	// Metrics is the node's instrumentation (nil: the daemon makes its own), served
	// on the control socket at /metrics and, with MetricsListen (a loopback
	// address), over HTTP.
	Metrics       *metrics.Metrics
	MetricsListen string
	// MetricsToken is the bearer token MetricsListen requires (none: it answers
	// nobody).
	MetricsToken string
	// NodeLog holds the node's own latest log lines (the Logger tees into it) for
	// GET /v1/logs; nil: an empty one.
	NodeLog *logring.Ring
	// Denials gives a plugin's recent sandbox denials (Seatbelt); nil where the
	// backend reports none.
	Denials func(plugin string) []api.SandboxDenial
	// SessionIdle closes an MCP session that has had no request for this long
	// (0: 30 minutes), so abandoned clients do not hold memory for good.
	SessionIdle time.Duration
	// BodyTimeout bounds how long a request's headers and body may take to arrive
	// on the MCP and control sockets (0: 10 seconds): a trickling client is cut.
	BodyTimeout time.Duration
	// MaxResult is the largest message a local server may send (0: serverconn.DefaultMaxResult).
	MaxResult int
	// NotifyRate is how many notifications a second one server may send
	// (0: DefaultNotifyRate); more are dropped and counted.
	NotifyRate int
	// Audit is the node's audit stream (nil: none); the proxy writes to it too.
	// Its owner closes it after Run.
	Audit *audit.Stream
	// Tracer exports traces (nil: off).
	Tracer Tracer
	// ApprovalWait is how long a request the tenant's lists refuse waits for an
	// operator's answer (0: refused at once).
	ApprovalWait time.Duration
	// InitTimeout is how long a started server has to answer initialize
	// (0: DefaultInitTimeout).
	InitTimeout time.Duration
	// ConnCap overrides the listeners' connection budget (0: from the
	// descriptor limit, conncap.Budget); a quarter of it is one peer's.
	ConnCap int
}

func (d *Daemon) maxResult() int { return cmp.Or(d.cfg.MaxResult, serverconn.DefaultMaxResult) }

// Daemon is a running node.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	gw      *gateway.Gateway
	met     *metrics.Metrics
	sup     *supervise.Supervisor
	started time.Time
	// start is the one way the node starts a server or a hook (node/launch).
	start *launch.Starter

	mu       sync.Mutex
	plugins  map[string]*plan.Plugin // by name, as last planned
	running  map[string]string       // plugin/server → fingerprint of the decision it runs with
	findings map[string]api.Finding  // code|subject → finding (raised at runtime)
	seen     map[string]string       // code|subject → when a plan finding was first seen

	planF   []api.Finding       // findings of the last plan
	held    map[string]string   // plugins held back by the last plan, and why
	tools   map[string][]string // plugin/server → namespaced tools
	subs    map[chan api.Event]struct{}
	dirty   chan struct{}
	reconc  chan struct{}
	hooks   *hookRunner
	closing bool
	// fileMode is what status.json and health.json get: 0644 under the umask in
	// force when the node started (077 unless the operator chose otherwise).
	fileMode os.FileMode
	runCtx   context.Context // Run's context: running hooks end with it
	hookWG   sync.WaitGroup  // running hooks, waited for on shutdown
	hookRuns []api.HookRun   // latest hook runs, newest first
	// notesDropped counts each server's notifications dropped over its rate,
	// across its restarts.
	notesDropped map[string]*atomic.Int64
	// unreachable are the plugins whose folders their user could not reach when
	// the node started them, and why (plan.Learned); every later decision for
	// them takes it.
	unreachable map[string]string
	// checked is each server's last allowed call check, and reconciles how many
	// reconciles ran (a memo from before one is not used after it).
	checked    map[string]checkMemo
	reconciles uint64
	// inputs watches the folders of the checks' inputs (checkmemo.go); nil
	// when they cannot be watched.
	inputs atomic.Pointer[inputWatch]

	toolRules toolRules      // the tenant's per-tool rules, live
	book      *approval.Book // approvals waiting; nil when off
	// conns bounds the connections every listener holds; doors are the MCP
	// doors over the gateway, with the caps on their sessions (doors.go).
	conns *conncap.Limits
	doors *mcpdoor.Doors
}

// learned is what the node has learned of its plugins, for a decision now.
func (d *Daemon) learned() plan.Learned {
	d.mu.Lock()
	defer d.mu.Unlock()
	return plan.Learned{UserUnreachable: maps.Clone(d.unreachable)}
}

// userUnreachable keeps that a plugin's user cannot reach what it needs: its next
// decision runs it as the node's user instead, and says why (docs/promises.md §8).
func (d *Daemon) userUnreachable(plugin, why string) {
	d.log.Warn("plugin user cannot reach its folders; running as the node's user", "plugin", plugin, "err", why)
	d.mu.Lock()
	if d.unreachable == nil {
		d.unreachable = map[string]string{}
	}
	d.unreachable[plugin] = why
	d.mu.Unlock()
	d.Reconcile()
}

// one decides for a plugin now, with what the node has learned.
func (d *Daemon) one(plugin string) (*plan.Plugin, error) { return d.start.Plan(plugin) }

// New builds a daemon; Run starts it.
func New(cfg Config) *Daemon {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Backends == nil {
		cfg.Backends = map[string]sandbox.Backend{}
	}
	if _, ok := cfg.Backends[policy.BackendNone]; !ok {
		cfg.Backends[policy.BackendNone] = sandbox.Direct{}
	}
	if cfg.NodeLog == nil {
		cfg.NodeLog = logring.New(1)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	d := &Daemon{
		cfg: cfg, log: cfg.Logger, started: time.Now(), met: cfg.Metrics,
		plugins: map[string]*plan.Plugin{}, running: map[string]string{},
		findings: map[string]api.Finding{}, seen: map[string]string{}, tools: map[string][]string{},
		subs: map[chan api.Event]struct{}{}, dirty: make(chan struct{}, 1), reconc: make(chan struct{}, 1),
	}
	d.fileMode = os.FileMode(0o644 &^ currentUmask())
	d.start = &launch.Starter{Node: cfg.Node, Learned: d.learned, Backend: launch.Backends(cfg.Backends), Unreachable: d.userUnreachable}
	if cfg.Egress != nil {
		d.start.Egress = &launch.InProcess{Proxy: cfg.Egress, Root: cfg.Node.Root, Log: cfg.Logger}
	}
	d.hooks = &hookRunner{d: d}
	if cfg.ApprovalWait > 0 {
		d.book = d.newBook(cfg.ApprovalWait)
	}
	d.loadToolRules()
	d.gw = gateway.New(gateway.Options{
		Logger: cfg.Logger, Check: d.check, Hooks: d.hooks, OnFinding: d.raise, Version: cfg.Version,
		OnCall: d.met.ToolCall, NotRunning: d.notRunning, Hidden: d.hidden, Observe: d.observeCall,
		CallTimeout:   cmp.Or(cfg.Node.Config.CallTimeout, config.DefaultCallTimeout),
		OnCallTimeout: func(plugin, server string) { d.sup.Check(key(plugin, server)) },
	})
	d.initDoors()
	d.loadLastTools()
	so := cfg.Supervise
	so.LogDir = cfg.Node.Dir.Logs()
	so.OnChange = d.serverChanged
	so.OnFinding = d.raise
	if so.PingEvery == 0 {
		so.PingEvery = cmp.Or(cfg.Node.Config.PingEvery, config.DefaultPingEvery)
	}
	if so.PingTimeout == 0 {
		so.PingTimeout = cmp.Or(cfg.Node.Config.PingTimeout, config.DefaultPingTimeout)
	}
	d.sup = supervise.New(so)
	d.met.CollectServers(d.serverCounts)
	return d
}

// Gateway exposes the MCP gateway (tests and benchmarks connect to it in memory).
func (d *Daemon) Gateway() *gateway.Gateway { return d.gw }

// Reconcile asks the node to re-plan: new plugins start, removed ones stop, a
// changed commit or decision restarts that plugin.
func (d *Daemon) Reconcile() {
	select {
	case d.reconc <- struct{}{}:
	default:
	}
}

// Run serves until ctx ends, then stops every server (gracefully, then killed).
func (d *Daemon) Run(ctx context.Context) error {
	n := d.cfg.Node
	d.mu.Lock()
	d.runCtx = ctx
	d.mu.Unlock()
	ctl, err := api.ListenUnix(n.Dir.Control())
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	defer ctl.Close()
	mcpLn, err := api.ListenUnix(n.Dir.MCP())
	if err != nil {
		return fmt.Errorf("MCP socket: %w", err)
	}
	defer mcpLn.Close()
	stdioLn, err := api.ListenUnix(n.Dir.MCPStdio())
	if err != nil {
		return fmt.Errorf("MCP stdio socket: %w", err)
	}
	defer stdioLn.Close()
	// The per-call check answers from its memo while its inputs' folders are
	// unchanged (checkmemo.go); without a watch it reads them at each call.
	if w, err := newInputWatch(n.Dir); err != nil {
		d.log.Debug("the per-call check reads its inputs at each call", "err", err)
	} else {
		d.inputs.Store(w)
		defer func() { d.inputs.Store(nil); w.Close() }()
	}

	readT := cmp.Or(d.cfg.BodyTimeout, 10*time.Second)
	// Callers hold sessions and connections within caps (doors.go).
	ctl, mcpLn = d.conns.Wrap(ctl, "control"), d.conns.Wrap(mcpLn, "mcp")
	stdioLn = d.conns.Wrap(stdioLn, "mcp-stdio")
	go d.doors.Run(ctx)
	mcpHandler := bodyDeadline(readT, d.doors.HTTP())
	control := http.NewServeMux()
	control.Handle("/", api.Handler(d))
	control.Handle("GET /metrics", d.met.Handler())
	d.operatorHandlers(control)
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: readT, IdleTimeout: 2 * time.Minute, ConnContext: peer.WithConn}
	}
	servers := []*http.Server{newServer(bodyDeadline(readT, control)), newServer(mcpHandler)}
	// Plan before serving, so the first status a client reads lists every plugin.
	d.reconcile(ctx)
	go releaseIdle(ctx, releaseEvery)
	go servers[0].Serve(ctl)
	go servers[1].Serve(mcpLn)
	var stdioWG sync.WaitGroup
	stdioCtx, stopStdio := context.WithCancel(ctx)
	stdioWG.Go(func() { d.doors.ServeStdio(stdioCtx, stdioLn) })
	defer func() { stopStdio(); stdioWG.Wait() }()
	if d.cfg.MCPListen != "" {
		tl, err := net.Listen("tcp", d.cfg.MCPListen)
		if err != nil {
			return fmt.Errorf("--mcp-listen %s: %w", d.cfg.MCPListen, err)
		}
		hs := newServer(bearer(d.cfg.Token, "mcp.token", mcpHandler))
		servers = append(servers, hs)
		go hs.Serve(d.conns.Wrap(tl, "mcp-listen"))
	}
	if d.cfg.MetricsListen != "" {
		ml, err := net.Listen("tcp", d.cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", d.cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", d.met.Handler())
		hs := newServer(bearer(d.cfg.MetricsToken, "metrics.token", mux))
		servers = append(servers, hs)
		go hs.Serve(d.conns.Wrap(ml, "metrics-listen"))
	}

	// Background work ends before Run returns: nothing writes into the data folder
	// after the node has stopped.
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); d.writer(ctx) }()
	bg.Go(func() { d.watchToolRules(ctx) })
	if d.cfg.Egress != nil {
		bg.Add(1)
		go func() { defer bg.Done(); d.forwardEgress(ctx) }()
	}
	defer bg.Wait()
	// The proxy was started before the daemon, the gateway in New, and the control
	// socket answers from here on: systemd may order dependent units after the node.
	notify(d.log, sd.SdNotifyReady)
	wd, stopWD := watchdogEvery(d.log)
	defer stopWD()
	for {
		select {
		case <-ctx.Done():
			notify(d.log, sd.SdNotifyStopping)
			d.shutdown(servers)
			// Last, once nothing else writes: the files say the node stopped.
			bg.Wait()
			d.writeStopped()
			return nil
		case <-d.reconc:
			d.reconcile(ctx)
		case <-wd:
			// From the main loop, so a node stuck in a reconcile stops pinging and
			// systemd restarts it.
			notify(d.log, sd.SdNotifyWatchdog)
		}
	}
}

// bearer answers only a request presenting token (kept in <data>/file) as its
// bearer token, compared in constant time.
func bearer(token, file string, h http.Handler) http.Handler {
	refusal := "missing or wrong bearer token (see <data>/" + file + ")"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" || !api.SecretEqual(r.Header.Get("Authorization"), "Bearer "+token) {
			http.Error(w, refusal, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (d *Daemon) shutdown(servers []*http.Server) {
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	d.log.Info("stopping servers")
	d.sup.StopAll()
	d.hookWG.Wait() // hooks end with Run's context; none start once closing
	for _, s := range servers {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.Shutdown(sctx)
		cancel()
	}
}

func key(plugin, server string) string { return plugin + "/" + server }

// fingerprint is what a running server's decision must still match for it to keep
// running: a change (commit, action, backend, user, network, the launcher
// package an update resolved anew for the same commit, or which of its values
// it holds as sentinels) restarts it. A secret's new value needs no restart: the
// proxy puts it in at once.
func fingerprint(p *plan.Plugin, t policy.Target) string {
	launch := ""
	if l := p.Installed.Launch(t.Name); l != nil {
		launch = l.Package + "@" + l.Version + "|" + l.Integrity + "|" + p.Installed.InstalledAt.String()
	}
	return fmt.Sprintf("%s|%s|%s|%d|%v|%s|%v|%s|%s", p.Installed.Commit, t.Action, t.Backend, t.User.UID, t.User.PerPlugin, t.Network, t.Exempt, launch,
		strings.Join(p.SentinelKeys(t.Name), ","))
}

func (d *Daemon) reconcile(ctx context.Context) {
	d.mu.Lock()
	d.reconciles++
	d.mu.Unlock()
	n := d.cfg.Node
	all, errs := installed.List(n.Dir)
	for _, err := range errs {
		d.log.Error("installed plugin unreadable; held back", "err", err)
	}
	plans, findings := n.PlanLearned(all, d.learned())
	held, heldF := heldBack(errs, findings)
	findings = append(findings, heldF...)
	names := make([]string, 0, len(all)+len(held))
	for _, in := range all {
		names = append(names, in.Name)
	}
	for name := range held {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	d.met.SetPlugins(names)
	isInstalled := func(name string) bool {
		return slices.ContainsFunc(all, func(in *installed.Plugin) bool { return in.Name == name })
	}
	findings = append(findings, policy.HookGrantFindings(n.Config.HookGrants, isInstalled)...)
	findings = append(findings, policy.HookTrustFindings(n.Config.HookApprove, n.Config.HookEgress, isInstalled)...)

	wanted := map[string]bool{}
	for _, p := range plans {
		if d.cfg.Egress != nil {
			if err := d.cfg.Egress.Set(p.EgressRules(), p.Endpoints()); err != nil {
				d.log.Error("egress endpoint", "plugin", p.Installed.Name, "err", err)
			}
		}
		for _, s := range p.Manifest.Servers {
			wanted[key(p.Installed.Name, s.Name)] = true
		}
	}

	d.mu.Lock()
	d.planF = findings
	heldBefore := d.held
	d.held = held
	old := d.plugins
	d.plugins = map[string]*plan.Plugin{}
	for _, p := range plans {
		d.plugins[p.Installed.Name] = p
	}
	var stop []string
	for k := range d.running {
		if !wanted[k] {
			stop = append(stop, k)
		}
	}
	d.mu.Unlock()
	// Held plugins answer why before their servers stop: a call in between
	// would otherwise reach a closing pipe.
	d.holdBack(heldBefore, held)

	// Removed servers stop together: one slow to stop cannot hold the main loop
	// (and its watchdog pings) for the sum of them.
	var stopping sync.WaitGroup
	for _, k := range stop {
		stopping.Go(func() { d.sup.Remove(k) })
	}
	stopping.Wait()
	for _, k := range stop {
		plugin, server, _ := strings.Cut(k, "/")
		if _, ok := held[plugin]; ok {
			// Held, not removed: its tools stay known, and answer why.
			d.log.Warn("server stopped: its plugin is held back", "plugin", plugin, "server", server)
			d.mu.Lock()
			delete(d.running, k)
			delete(d.tools, k)
			d.mu.Unlock()
			continue
		}
		d.log.Info("server removed", "plugin", plugin, "server", server)
		d.gw.Forget(plugin, server)
		d.rememberTools(plugin, server, nil)
		d.mu.Lock()
		delete(d.running, k)
		delete(d.tools, k)
		d.mu.Unlock()
	}
	for name := range old {
		if _, ok := d.plugins[name]; !ok && d.cfg.Egress != nil {
			d.cfg.Egress.RemovePlugin(name)
		}
		if _, ok := d.plugins[name]; !ok {
			d.gw.SetCommands(name, nil)
		}
	}
	// Slash commands are text: offered as prompts, with no plugin code run.
	for _, p := range plans {
		cmds, errs := commands.Load(p.Installed.Dir)
		for _, err := range errs {
			d.log.Warn("command not offered", "plugin", p.Installed.Name, "err", err)
		}
		d.gw.SetCommands(p.Installed.Name, cmds)
	}

	for _, p := range plans {
		for _, s := range p.Manifest.Servers {
			t, _ := p.Decision.Server(s.Name)
			k := key(p.Installed.Name, s.Name)
			fp := fingerprint(p, t)
			d.mu.Lock()
			same := d.running[k] == fp
			d.running[k] = fp
			d.mu.Unlock()
			if same {
				continue
			}
			d.sup.Remove(k)
			if t.Action == policy.Refused {
				d.log.Warn("server refused", "plugin", p.Installed.Name, "server", s.Name, "reason", t.Refusal())
				d.gw.Refuse(p.Installed.Name, s.Name, t.Refusal())
				continue
			}
			d.startServer(ctx, p, s.Name, t)
		}
	}
	d.changed()
}

func upState(t policy.Target) string {
	switch {
	case t.Exempt:
		return api.StateExemptRun
	case t.Action == policy.Unsandboxed:
		return api.StateUnsandboxed
	}
	return api.StateRunning
}

func (d *Daemon) startServer(ctx context.Context, p *plan.Plugin, server string, t policy.Target) {
	plugin := p.Installed.Name
	d.log.Info("starting server", "plugin", plugin, "server", server, "action", t.Action, "backend", t.Backend, "user", t.User.String())
	u := &supervise.Unit{
		Plugin:  plugin,
		Server:  server,
		UpState: upState(t),
		Start: func(ctx context.Context, stderr io.Writer) (supervise.Session, error) {
			return d.launch(ctx, plugin, server, stderr)
		},
		Up: func(s supervise.Session) {
			ms := s.(*mcpSession)
			if err := d.gw.AttachRaw(ctx, plugin, server, ms.cs, ms.raw, ms.order); err != nil {
				d.log.Error("attach tools", "plugin", plugin, "server", server, "err", err)
			}
			tools := d.gw.Tools(plugin, server)
			d.mu.Lock()
			d.tools[key(plugin, server)] = tools
			d.mu.Unlock()
			if len(tools) >= manyTools {
				serverconn.ReleaseSoon()
			}
			d.rememberTools(plugin, server, d.gw.ToolNames(plugin, server))
		},
		Down: func() {
			why := fmt.Sprintf("server %s/%s is not running (restarting)", plugin, server)
			d.mu.Lock()
			if h, ok := d.held[plugin]; ok { // stopped because its plugin is held back
				why = "plugin " + plugin + " is held back: " + h
			}
			d.mu.Unlock()
			d.gw.Detach(plugin, server, why)
		},
	}
	d.sup.Add(ctx, u)
}

// mcpSession is a started server: its MCP client session and sandbox cleanup.
type mcpSession struct {
	cs      *mcp.ClientSession
	tr      *serverconn.Breakable
	live    *pendingTransport     // the node's requests in flight; nil: not checked (remote)
	raw     gateway.RawBackend    // the fast path's way to the server; nil for none
	order   gateway.ProgressOrder // hands over the server's progress as it is read; nil for none
	kill    func()                // ends its process at once; nil for none (remote)
	cleanup func() error
	once    sync.Once
}

func (m *mcpSession) Wait() error { return m.cs.Wait() }

// Interrupt implements supervise.Interrupter: calls in flight end with cause.
func (m *mcpSession) Interrupt(cause error) {
	if m.tr != nil {
		m.tr.Break(cause)
	}
}

func (m *mcpSession) Close() error {
	var err error
	m.once.Do(func() {
		err = m.cs.Close()
		if m.cleanup != nil {
			if cerr := m.cleanup(); cerr != nil && err == nil {
				err = cerr
			}
		}
	})
	return err
}

// launch plans the server again (never from a cached decision), builds its
// sandbox and connects to it over stdio.
func (d *Daemon) launch(ctx context.Context, plugin, server string, stderr io.Writer) (*mcpSession, error) {
	p, err := d.one(plugin)
	if err != nil {
		return nil, err
	}
	if s := p.Manifest.Server(server); s != nil && s.IsRemote() {
		if t, _ := p.Decision.Server(server); t.Action != policy.Remote {
			// A change the node's watchers did not see (the proxy cut the
			// server's connection first): the reconcile makes it refused.
			d.Reconcile()
			return nil, fmt.Errorf("server %s/%s: %s", plugin, server, t.Refusal())
		}
		return d.launchRemote(ctx, p, s, stderr)
	}
	started, err := d.start.Server(ctx, plugin, server)
	if err != nil {
		return nil, err
	}
	spec, proc := started.Spec, started.Proc
	proc.Cmd.Stderr = stderr
	start := time.Now()
	st := &serverconn.Stdio{Cmd: proc.Cmd, Start: proc.Start, Terminate: 2 * time.Second, Max: d.maxResult(), TooLarge: d.resultTooLarge(plugin, server),
		Notes: d.noteLimiter(plugin, server), Log: d.log}
	live := &pendingTransport{inner: st}
	tr := &serverconn.Breakable{Inner: live}
	initT := cmp.Or(d.cfg.InitTimeout, DefaultInitTimeout)
	cctx, cancel := context.WithTimeout(ctx, initT)
	defer cancel()
	cs, err := d.gw.Client(plugin, server).Connect(cctx, tr, gateway.SessionOptions())
	if err != nil {
		if proc.Cmd.Process != nil {
			proc.Cmd.Process.Kill()
			proc.Cmd.Wait()
		}
		if proc.Cleanup != nil {
			proc.Cleanup()
		}
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, d.neverInitialized(plugin, server, initT)
		}
		return nil, fmt.Errorf("server %s/%s: connect: %w", plugin, server, err)
	}
	d.met.SandboxStart(spec.Backend, time.Since(start))
	var raw gateway.RawBackend
	var order gateway.ProgressOrder
	if c, broken := st.Conn(), tr.Broken(); c != nil && broken != nil {
		c.BreaksWith(broken)
		raw, order = c, c
	}
	kill := func() { proc.Cmd.Process.Kill() }
	return &mcpSession{cs: cs, tr: tr, live: live, raw: raw, order: order, kill: kill, cleanup: proc.Cleanup}, nil
}

// DefaultInitTimeout is how long a started server has to answer initialize.
const DefaultInitTimeout = 30 * time.Second

// neverInitialized reports a server that started but did not answer initialize
// in time: a finding with its stderr's last lines, and calls of its plugin's
// tools answer why (it has offered none yet).
func (d *Daemon) neverInitialized(plugin, server string, after time.Duration) error {
	k := key(plugin, server)
	why := fmt.Sprintf("server %s started but did not answer initialize within %s", k, after)
	msg := why
	if lines, err := d.sup.Logs(k, 5); err == nil && len(lines) > 0 {
		msg += "; last stderr: " + strings.Join(lines, " | ")
	}
	d.raise(api.Finding{Code: api.CodeUnresponsive, Severity: api.SevError, Subject: k, Message: msg,
		Fix: fmt.Sprintf("the node starts it again with back-off; read its log (logs/%s.%s.log): a server that waits for something before it speaks MCP, or writes its protocol elsewhere than stdout, never comes up", plugin, server)})
	d.gw.Detach(plugin, server, why+"; the node starts it again")
	return errors.New(why)
}

// resultTooLarge is told of each message of a server's over the node's limit
// (a local server's line, a remote server's body or event): it is logged and
// raises a finding.
func (d *Daemon) resultTooLarge(plugin, server string) func(id string, size int) {
	return func(id string, size int) {
		d.log.Warn("server result too large; answered as an error", "plugin", plugin, "server", server, "id", id, "bytes", size)
		d.raise(api.Finding{Code: api.CodeResultTooLarge, Severity: api.SevWarning, Subject: plugin + "/" + server,
			Message: fmt.Sprintf("server %s/%s sent a message over %d MiB (%d bytes read); its call was answered with an error", plugin, server, d.maxResult()>>20, size)})
	}
}

// check is the gateway's Check, on every path a call takes: the server's policy
// (checkServer), then for a tool the tenant's tool rules (checkTool).
func (d *Daemon) check(ctx context.Context, c gateway.Call) gateway.Verdict {
	v := d.checkServer(c.Plugin, c.Server)
	if !v.OK || c.Tool == "" {
		return v
	}
	return d.checkTool(ctx, c)
}

// checkServer re-evaluates the policy before a call (docs/promises.md §9): the
// plugin's installed commit and the decision are computed now; if they no longer
// match what the server was started with, the call is refused and the node
// reconciles.
func (d *Daemon) checkServer(plugin, server string) gateway.Verdict {
	k := key(plugin, server)
	in, memo := d.checkInputs(plugin, server)
	if memo {
		d.mu.Lock()
		last, ok := d.checked[k]
		hit := ok && last.sameInputs(in) && in.running != ""
		if hit && in.watched && (!last.watched || last.watch != in.watch) {
			d.checked[k] = in // the next calls answer from the watch
		}
		d.mu.Unlock()
		if hit {
			return gateway.Verdict{OK: true}
		}
	}
	p, err := d.one(plugin)
	if err != nil {
		d.Reconcile()
		return gateway.Verdict{Reason: fmt.Sprintf("plugin %s: %v", plugin, err)}
	}
	t, ok := p.Decision.Server(server)
	if !ok {
		d.Reconcile()
		return gateway.Verdict{Reason: fmt.Sprintf("plugin %s has no server %s any more", plugin, server)}
	}
	if t.Action == policy.Refused {
		d.Reconcile()
		return gateway.Verdict{Reason: t.Refusal()}
	}
	d.mu.Lock()
	fp := d.running[k]
	d.mu.Unlock()
	if fp != fingerprint(p, t) {
		d.Reconcile()
		return gateway.Verdict{Reason: fmt.Sprintf("the decision for %s/%s changed since it started (now: %s); it is being restarted", plugin, server, strings.Join(t.Reasons, "; "))}
	}
	// Remembered with the inputs as read before deciding: an input that changed
	// meanwhile differs from them at the next call, which decides again.
	if memo && in.commit == p.Installed.Commit && in.running == fp {
		d.mu.Lock()
		if d.checked == nil {
			d.checked = map[string]checkMemo{}
		}
		d.checked[k] = in
		d.mu.Unlock()
	}
	return gateway.Verdict{OK: true}
}

// raise records a runtime finding (crash loops, collisions) and publishes it.
func (d *Daemon) raise(f api.Finding) {
	if f.Code == api.CodeCrashLoop {
		d.explainCrash(&f)
		f = d.withDenials(f)
	}
	f.Time = time.Now().UTC().Format(time.RFC3339)
	d.mu.Lock()
	d.findings[f.Code+"|"+f.Subject] = f
	d.mu.Unlock()
	d.log.Warn("finding", "code", f.Code, "subject", f.Subject, "message", f.Message)
	d.publish(api.Event{Type: "finding", Finding: &f})
	d.changed()
}

// withDenials adds to a crash-loop finding what the plugin's sandbox denied within
// the crash window: a server that crashes right after a denial most likely
// needed what was denied.
func (d *Daemon) withDenials(f api.Finding) api.Finding {
	if d.cfg.Denials == nil {
		return f
	}
	plugin, _, _ := strings.Cut(f.Subject, "/")
	window := d.cfg.Supervise.CrashWindow
	if window <= 0 {
		window = 2 * time.Minute // the supervisor's default window
	}
	since := time.Now().Add(-window)
	var recent, hints []string
	for _, dn := range d.cfg.Denials(plugin) {
		if t, err := time.Parse(time.RFC3339Nano, dn.Time); err != nil || t.Before(since) {
			continue
		}
		if dn.Hint != "" && !slices.Contains(hints, dn.Hint) {
			hints = append(hints, dn.Hint)
		}
		if len(recent) == 3 {
			recent = append(recent, "…")
			break
		}
		recent = append(recent, fmt.Sprintf("%s %s (%s)", dn.Operation, dn.Target, dn.Process))
	}
	if len(recent) > 0 {
		f.Message += "; its sandbox denied just before: " + strings.Join(recent, ", ")
		f.Fix += "; if the server needs what its sandbox denied, the profile lacks it (oz0-node sandbox show " + plugin + ")"
		for _, h := range hints {
			f.Fix += "; " + h
		}
	}
	return f
}

func (d *Daemon) serverChanged(ev api.ServerEvent) {
	d.publish(api.Event{Type: "server", Server: &ev})
	d.changed()
}

func (d *Daemon) changed() {
	select {
	case d.dirty <- struct{}{}:
	default:
	}
}

func (d *Daemon) publish(ev api.Event) {
	ev.Time = time.Now().UTC().Format(time.RFC3339Nano)
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.subs {
		select {
		case c <- ev:
		default: // a slow subscriber misses an event; the next status catches it up
		}
	}
}

func (d *Daemon) forwardEgress(ctx context.Context) {
	c, cancel := d.cfg.Egress.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-c:
			if !ok {
				return
			}
			d.publish(api.Event{Type: "egress", Egress: &e})
			d.changed()
		}
	}
}

// writer coalesces changes: status.json and health.json are rewritten atomically
// and a full status event is published at most every 100 ms. A write that failed
// is tried again every diskRetry, changes or not, so health.json names the live
// node as soon as writing works again.
func (d *Daemon) writer(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.dirty:
		case <-retry:
		}
		retry = nil
		st := d.Status()
		d.publish(api.Event{Type: "status", Status: st})
		if d.writeStatus(st) {
			retry = time.After(diskRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeStopped writes status.json and health.json a last time, saying stopped.
func (d *Daemon) writeStopped() {
	st := d.Status()
	st.Node.Health = api.HealthStopped
	d.writeStatus(st)
}

// Subscribe implements api.Provider.
func (d *Daemon) Subscribe() (<-chan api.Event, func()) {
	c := make(chan api.Event, 256)
	c <- api.Event{Type: "status", Time: time.Now().UTC().Format(time.RFC3339Nano), Status: d.Status()}
	d.mu.Lock()
	d.subs[c] = struct{}{}
	d.mu.Unlock()
	return c, func() {
		d.mu.Lock()
		delete(d.subs, c)
		d.mu.Unlock()
	}
}

// Restart implements api.Provider.
func (d *Daemon) Restart(plugin, server string) error {
	return d.sup.Restart(key(plugin, server))
}

// Logs implements api.Provider.
func (d *Daemon) Logs(plugin, server string, n int) ([]string, error) {
	return d.sup.Logs(key(plugin, server), n)
}

// NodeLogs implements api.NodeLogger.
func (d *Daemon) NodeLogs(n int) []string { return d.cfg.NodeLog.Last(n) }

// FollowNodeLogs implements api.NodeLogger.
func (d *Daemon) FollowNodeLogs() (<-chan string, func()) { return d.cfg.NodeLog.Follow() }

// Follow implements api.Provider.
func (d *Daemon) Follow(plugin, server string) (<-chan string, func(), error) {
	return d.sup.Follow(key(plugin, server))
}

// serverCounts feeds the server gauges at scrape time, from the status operators
// see (refused servers included, which the supervisor never runs).
func (d *Daemon) serverCounts() []metrics.ServerCount {
	var out []metrics.ServerCount
	for _, p := range d.Status().Plugins {
		for _, s := range p.Servers {
			out = append(out, metrics.ServerCount{Plugin: p.Name, State: s.State, Servers: 1, Restarts: s.Restarts, Server: s.Name, NotesDropped: s.NotesDropped})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// bodyDeadline gives a request's body d to arrive, then lifts the deadline once it
// has: http.Server's ReadTimeout would also cut the long-lived event streams a
// call answers on, while no timeout at all lets a trickling client hold a
// connection for good.
func bodyDeadline(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			h.ServeHTTP(w, r)
			return
		}
		r.Body = &liftAtEOF{ReadCloser: r.Body, lift: func() { rc.SetReadDeadline(time.Time{}) }}
		h.ServeHTTP(w, r)
	})
}

// liftAtEOF calls lift once, when the body has been read to its end.
type liftAtEOF struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}
