package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/install"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/sandbox"
)

// egressAdapter gives the daemon the proxy as it needs it: one socket endpoint per
// plugin (bound into its Linux sandboxes) plus one loopback port (host-network
// modes, Seatbelt, unsandboxed exec).
type egressAdapter struct {
	p     *egress.Proxy
	d     datadir.Dir
	mu    sync.Mutex
	ports map[string]int
	rules map[string]egress.PluginRules
}

func (a *egressAdapter) AddPlugin(plugin string, eg []manifest.EgressEntry, servers map[string][]manifest.EgressEntry) (int, error) {
	rules := egress.PluginRules{Plugin: plugin, Egress: eg, Servers: servers}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rules[plugin] = rules
	if port, ok := a.ports[plugin]; ok {
		return port, a.p.UpdatePlugin(rules)
	}
	ep, err := a.p.AddPlugin(rules, egress.Listen{Socket: filepath.Join(a.d.EgressSocketDir(plugin), sandbox.ProxySocket), TCP: true})
	if err != nil {
		return 0, err
	}
	a.ports[plugin] = int(ep.TCP.Port())
	return a.ports[plugin], nil
}

func (a *egressAdapter) RemovePlugin(plugin string) {
	a.mu.Lock()
	delete(a.ports, plugin)
	delete(a.rules, plugin)
	a.mu.Unlock()
	a.p.RemovePlugin(plugin)
}

func (a *egressAdapter) Counts(plugin string) (int64, int64) {
	st, _ := a.p.Stats(plugin)
	return st.Allowed, st.Denied
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

// startEgress starts the node's egress proxy; it closes when ctx ends.
func startEgress(ctx context.Context, d datadir.Dir, cfg config.Run, log *slog.Logger) (daemon.Egress, error) {
	p, err := egress.New(egress.Config{TenantListPath: d.TenantList(), AuditPath: d.Audit(), AllowCIDRs: cfg.AllowCIDRs, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	go func() { <-ctx.Done(); p.Close() }()
	return &egressAdapter{p: p, d: d, ports: map[string]int{}, rules: map[string]egress.PluginRules{}}, nil
}

// managedRuntimes are the runtime folders plugins need read access to.
func managedRuntimes(d datadir.Dir) []string {
	rs, err := install.Runtimes(d)
	if err != nil {
		slog.Warn("managed runtimes not found; plugins get the system's", "err", err)
	}
	return rs
}

// preparePlugin fixes a plugin's folder modes before each start on root nodes
// (search bits on the way, its own folder readable by its user, its home its own)
// and checks it can read the node binary (the egress bridge) and the runtimes.
func preparePlugin(d datadir.Dir, nodeBinary string) func(*plan.Plugin) error {
	return func(p *plan.Plugin) error {
		u := p.Decision.User
		return install.PreparePerms(d, p.Installed.Name, u.UID, u.GID, nodeBinary)
	}
}
