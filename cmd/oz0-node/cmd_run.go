package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"

	"oz0.ai/node/internal/gcpace"
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/logring"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/sandbox/probe"
	"oz0.ai/node/node/tracing"
	"oz0.ai/node/node/userconf"
)

func newRunCmd(g *globals) *cobra.Command {
	rf := &runFlags{}
	var logFormat string
	var sessionIdle time.Duration
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the node: probe the sandbox tier, start the egress proxy and every installed plugin's servers",
		Long: `Run the node in the foreground. It probes which sandbox backend works (the tier),
fixes the data folder's modes, starts the egress proxy, then starts every installed
plugin's MCP servers as the policy decides, and serves MCP and the control API on
sockets under <data>/run. SIGTERM or SIGINT stop it; SIGHUP or a change under
<data>/plugins reconciles (new plugins start, removed ones stop, a changed commit
restarts its plugin).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := rf.parse(g)
			if err != nil {
				return err
			}
			return runNode(cmd.Context(), g, cfg, logFormat, sessionIdle)
		},
	}
	rf.add(c)
	c.Flags().StringVar(&logFormat, "log-format", "auto", "log format: auto (text on a terminal, JSON otherwise), text or json")
	c.Flags().DurationVar(&sessionIdle, "mcp-session-idle", 30*time.Minute, "close an MCP session after this long without a request")
	return c
}

func newLogger(format string) *slog.Logger {
	if format == "auto" {
		format = "json"
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, nil))
}

func runNode(ctx context.Context, g *globals, cfg config.Run, logFormat string, sessionIdle time.Duration) error {
	datadir.SetUmask()
	// The node's own log also goes to a ring that `oz0-node logs` reads.
	nodeLog := logring.New(2000)
	log := slog.New(nodeLog.Handler(newLogger(logFormat).Handler()))
	slog.SetDefault(log)
	d, err := g.dir()
	if err != nil {
		return err
	}
	root := os.Geteuid() == 0
	if _, err := api.NewClient(d.Control()).Status(context.Background()); err == nil {
		return fmt.Errorf("another node is already running on %s (its control socket %s answers)", d.Root, d.Control())
	}
	if err := d.Create(root); err != nil {
		return err
	}
	if n, err := sweepStale(context.Background(), d.Root); n > 0 || err != nil {
		log.Info("removed what a stopped node left behind", "items", n, "err", err)
	}
	if err := install.CleanStaging(d); err != nil {
		log.Warn("clean staging", "err", err)
	}

	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Go's default collector pace while the node is quiet, a slower one while
	// calls stream through it; GOGC in the environment fixes it instead.
	if os.Getenv("GOGC") == "" {
		go gcpace.Run(ctx, gcpace.Default, log)
	}

	// The node probes for real and leaves the verdict for exec and hooks.
	tr, err := probe.Run(ctx, platform(), cfg.Backend, probe.RefreshCache(d, platform()))
	if err != nil {
		return err
	}
	rs, err := nodeRuntimes(d)
	if err != nil {
		log.Warn("managed runtimes not found; plugins get the system's", "err", err)
	}
	n := plan.New(d, cfg, tr.Verdict(), rs)
	findings := append(tr.Findings, n.Findings()...)
	for _, f := range findings {
		if f.Severity != api.SevInfo {
			log.Warn("node finding", "finding", f.Code, "message", f.Message, "fix", f.Fix)
		}
	}

	met := metrics.New()
	// The one audit stream: the proxy's decisions, the daemon's calls, hook
	// runs and approvals. It closes last, once nothing writes to it.
	late := &lateDaemon{}
	stream, err := audit.Open(d.Audit(), audit.Options{Logger: log, OnWrite: late.auditWritten})
	if err != nil {
		return err
	}
	defer stream.Close()
	// Traces only when asked for: off, no tracer exists and nothing of it runs.
	var tracer daemon.Tracer
	var egressSpan func(api.EgressDecision)
	if tc := (tracing.Config{Endpoint: cfg.OTLPEndpoint, Getenv: os.Getenv, Version: versionString()}); tracing.Enabled(tc) {
		tr, err := tracing.New(ctx, tc)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				log.Warn("traces: the last spans were not sent", "err", err)
			}
		}()
		tracer, egressSpan = tr, tr.Egress
		log.Info("exporting traces over OTLP", "endpoint", cfg.OTLPEndpoint)
	}
	eg, err := startEgress(ctx, d, cfg, log, met, stream, late.askEgress, egressSpan)
	if err != nil {
		return err
	}
	token, metricsToken := "", ""
	if cfg.MCPListen != "" {
		if token, err = nodeToken(d.Token(), "MCP token"); err != nil {
			return err
		}
	}
	// Under auto a sandbox shares the host's network and reaches loopback: the
	// metrics listener answers only the token's holder (docs/operators.md).
	if cfg.MetricsListen != "" {
		if metricsToken, err = nodeToken(d.MetricsToken(), "metrics token"); err != nil {
			return err
		}
	}
	dm := daemon.New(daemon.Config{
		Node: n, Backends: tr.Works, Egress: eg,
		Logger: log, Version: versionString(), NodeFindings: findings, Probes: tr.Probes,
		MCPListen: cfg.MCPListen, Token: token, Metrics: met, MetricsListen: cfg.MetricsListen, MetricsToken: metricsToken, NodeLog: nodeLog,
		Denials:     followDenials(ctx, tr.Backend, log),
		SessionIdle: sessionIdle, NotifyRate: cfg.NotifyRate,
		Audit: stream, ApprovalWait: cfg.ApprovalWait, Tracer: tracer,
	})
	late.d.Store(dm)
	log.Info("node starting", "data", d.Root, "tier", n.Tier, "backend", n.Backend, "mode", cfg.Mode, "root", root)

	go watchPlugins(ctx, d, dm, log)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			log.Info("SIGHUP: reconciling plugins")
			dm.Reconcile()
		}
	}()
	err = dm.Run(ctx)
	eg.Close() // its last decisions go to the stream before it closes
	log.Info("node stopped")
	os.Remove(d.Status())
	return err
}

// watchPlugins reconciles when anything under plugins/ changes: an install's
// atomic `current` switch or a removal.
func watchPlugins(ctx context.Context, d datadir.Dir, dm *daemon.Daemon, log *slog.Logger) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("plugin watcher unavailable; SIGHUP still reconciles", "err", err)
		return
	}
	defer w.Close()
	// The operator's plugin values: a value set lets a held-back server start.
	if os.MkdirAll(userconf.Folder(d), datadir.ModePrivate) == nil {
		w.Add(userconf.Folder(d))
	}
	// The tenant's list: a remote server starts or stops as its host is listed.
	w.Add(d.TenantDir())
	add := func() {
		w.Add(d.Plugins())
		ents, _ := os.ReadDir(d.Plugins())
		for _, e := range ents {
			if e.IsDir() {
				w.Add(d.Plugin(e.Name()))
			}
		}
	}
	add()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if strings.HasSuffix(ev.Name, ".tmp") || strings.Contains(ev.Name, ".tmp-") {
				continue
			}
			add()
			dm.Reconcile()
		case <-w.Errors:
		}
	}
}

// maxToken bounds a token an operator may write.
const maxToken = 4096

// nodeToken returns the bearer token kept in the file p (the MCP token for
// --mcp-listen, the metrics token for --metrics-listen), creating it (0600)
// once; an operator may write one of their own of 32 characters or more.
func nodeToken(p, what string) (string, error) {
	b, err := os.ReadFile(p)
	tok := strings.TrimSpace(string(b))
	if err == nil && len(tok) >= 32 && len(tok) <= maxToken {
		return tok, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s %s: %w", what, p, err)
	}
	if err == nil {
		// Too short (torn, emptied) or too long to be one an operator wrote:
		// a new one is made, as at the first start.
		slog.Warn("token file unusable; a new token is made", "file", p, "bytes", len(b))
	}
	buf := make([]byte, 32)
	rand.Read(buf)
	tok = hex.EncodeToString(buf)
	if err := datadir.WriteFileAtomic(p, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", what, err)
	}
	return tok, nil
}
