package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/pluginuser"
	"oz0.ai/node/node/policy"
)

// egressAdapter gives the daemon the proxy as it needs it: per plugin, the
// endpoints egress.Endpoints keeps (its own, its hooks', and one per server), and
// the proxy's counts, decisions and findings for status.
type egressAdapter struct {
	*egress.Endpoints
	p *egress.Proxy
}

func (a *egressAdapter) Counts(plugin string) (int64, int64) {
	st, _ := a.p.Stats(plugin)
	return st.Allowed, st.Denied
}

func (a *egressAdapter) Refusals(plugin string) map[string]int64 {
	st, _ := a.p.Stats(plugin)
	var m map[string]int64
	for cause, n := range map[string]int64{"conn-cap": st.Refused, "credential": st.AuthRefused} {
		if n > 0 {
			if m == nil {
				m = map[string]int64{}
			}
			m[cause] = n
		}
	}
	return m
}

func (a *egressAdapter) Recent(n int) []api.EgressDecision { return a.p.Recent(n) }
func (a *egressAdapter) Findings() []api.Finding           { return a.p.Findings() }
func (a *egressAdapter) Tenant() ([]string, bool) {
	st := a.p.Status(0)
	return st.Patterns, st.TenantOK
}
func (a *egressAdapter) Subscribe() (<-chan api.EgressDecision, func()) {
	return a.p.Subscribe(256)
}

// standaloneEgress is the proxy exec and hook serve their plugin's endpoint from
// when no node runs, with the tenant's list as it stands; close the proxy when
// done. They are foreground tools: it speaks up only for what goes wrong.
func standaloneEgress(d datadir.Dir) (*egress.Proxy, *egress.Endpoints, error) {
	audit := ""
	if fi, err := os.Stat(d.Logs()); err == nil && fi.IsDir() {
		audit = d.Audit()
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// It follows the tenant list by polling its stat: an inotify watch would cost
	// every exec or hook the kernel's ~10 ms to tear it down at exit
	// (docs/performance.md).
	pr, err := egress.New(egress.Config{TenantListPath: d.TenantList(), AuditPath: audit, Logger: quiet,
		PollOnly: true, PollInterval: standaloneTenantPoll})
	if err != nil {
		return nil, nil, fmt.Errorf("egress proxy: %w", err)
	}
	return pr, egress.NewEndpoints(pr, d), nil
}

// standaloneTenantPoll is how often a standalone endpoint reads the tenant list's
// stat: a host taken off the list is refused within about this plus a read.
const standaloneTenantPoll = 25 * time.Millisecond

// startEgress starts the node's egress proxy; it closes when ctx ends.
func startEgress(ctx context.Context, d datadir.Dir, cfg config.Run, log *slog.Logger, met *metrics.Metrics) (daemon.Egress, error) {
	if _, err := d.EnsureKey(); err != nil {
		return nil, fmt.Errorf("egress credentials: %w", err) // host-loopback endpoints derive theirs from it
	}
	p, err := egress.New(egress.Config{TenantListPath: d.TenantList(), AuditPath: d.Audit(), AllowCIDRs: cfg.AllowCIDRs, Logger: log,
		Observe:        func(e api.EgressDecision) { met.Egress(e.Plugin, e.Decision, e.Rule, e.Bytes) },
		OnRefuse:       met.EgressRefused,
		OnTenantReload: met.TenantReload,
	})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	go func() { <-ctx.Done(); p.Close() }()
	return &egressAdapter{Endpoints: egress.NewEndpoints(p, d), p: p}, nil
}

// nodeRuntimes are the managed runtime folders (Python, Node.js) plugins need
// read access to; every command that plans reads them here.
func nodeRuntimes(d datadir.Dir) ([]string, error) { return installed.Runtimes(d) }

// preparePlugin fixes a plugin's folder modes before each start on root nodes
// (search bits on the way, its own folder readable by its user, its home its own)
// and checks it can read the node binary (the egress bridge) and the runtimes.
// A Landlock sandbox runs no bridge: the node binary is not its to read.
func preparePlugin(d datadir.Dir, nodeBinary string) func(*plan.Plugin) error {
	return func(p *plan.Plugin) error {
		u := p.Decision.User
		if p.Decision.Backend == policy.BackendLandlock {
			return pluginuser.Prepare(d, p.Installed.Name, u.UID, u.GID)
		}
		return pluginuser.Prepare(d, p.Installed.Name, u.UID, u.GID, nodeBinary)
	}
}
