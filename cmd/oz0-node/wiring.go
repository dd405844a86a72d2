package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/metrics"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/pluginuser"
	"oz0.ai/node/node/sandbox"
)

// egressAdapter gives the daemon the proxy as it needs it: per plugin, an endpoint
// of its own (its hooks') and one per server, each a socket bound into the
// sandboxes it serves and, where a host-loopback port is the only way in (auto,
// Seatbelt), a port that requires the endpoint's credential.
type egressAdapter struct {
	p     *egress.Proxy
	d     datadir.Dir
	creds credentials
	mu    sync.Mutex
	eps   map[string]map[string]*openEndpoint // plugin → server ("" its own)
	rules map[string]egress.PluginRules
}

type openEndpoint struct {
	ep         egress.Endpoint
	want       plan.Endpoint
	credential string
}

// egressSocket is where the endpoint of a plugin's server ("" its own) listens.
func egressSocket(d datadir.Dir, plugin, server string) string {
	if server == "" {
		return filepath.Join(d.EgressSocketDir(plugin), sandbox.ProxySocket)
	}
	return filepath.Join(d.EgressServerSocketDir(plugin, server), sandbox.ProxySocket)
}

func (a *egressAdapter) SetPlugin(plugin string, eg []manifest.EgressEntry, servers map[string][]manifest.EgressEntry, want []plan.Endpoint) error {
	rules := egress.PluginRules{Plugin: plugin, Egress: eg, Servers: servers}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rules[plugin] = rules
	have := a.eps[plugin]
	if have == nil {
		have = map[string]*openEndpoint{}
		a.eps[plugin] = have
	}
	var errs []error
	if len(have) > 0 {
		if err := a.p.UpdatePlugin(rules); err != nil {
			errs = append(errs, err)
		}
	}
	wanted := map[string]plan.Endpoint{}
	for _, e := range want {
		wanted[e.Server] = e
	}
	for server, oe := range have {
		if w, ok := wanted[server]; !ok || w != oe.want {
			a.p.CloseEndpoint(oe.ep)
			delete(have, server)
		}
	}
	// Two servers whose folders would be one would share an endpoint: neither
	// gets one (their names hash alike; renaming one fixes it).
	dirs := map[string][]string{}
	for _, e := range want {
		dirs[egressSocket(a.d, plugin, e.Server)] = append(dirs[egressSocket(a.d, plugin, e.Server)], e.Server)
	}
	// The plugin's own first: its socket folder holds its servers' folders.
	ordered := append([]plan.Endpoint(nil), want...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Server == "" && ordered[j].Server != "" })
	for _, e := range ordered {
		if _, ok := have[e.Server]; ok {
			continue
		}
		if same := dirs[egressSocket(a.d, plugin, e.Server)]; len(same) > 1 {
			errs = append(errs, fmt.Errorf("plugin %s: servers %q share an egress socket folder; none of them gets an endpoint", plugin, same))
			continue
		}
		at := egress.Listen{Socket: egressSocket(a.d, plugin, e.Server), SocketGroup: int(e.GID), Server: e.Server, TCP: e.HostPort}
		if e.HostPort {
			cred, err := a.creds.of(plugin, e.Server)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			at.Credential = cred
		}
		ep, err := a.p.AddPlugin(rules, at)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		have[e.Server] = &openEndpoint{ep: ep, want: e, credential: at.Credential}
	}
	return errors.Join(errs...)
}

func (a *egressAdapter) Endpoint(plugin, server string) (int, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	oe := a.eps[plugin][server]
	if oe == nil || !oe.want.HostPort {
		return 0, ""
	}
	return int(oe.ep.TCP.Port()), oe.credential
}

func (a *egressAdapter) RemovePlugin(plugin string) {
	a.mu.Lock()
	delete(a.eps, plugin)
	delete(a.rules, plugin)
	a.mu.Unlock()
	a.p.RemovePlugin(plugin)
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

// credentials derive the credentials of host-loopback egress endpoints from the
// node's key, so that `oz0-node exec` beside a running node derives the same ones
// without the node handing them out.
type credentials struct{ seed []byte }

func nodeCredentials(d datadir.Dir) (credentials, error) {
	k, err := d.EnsureKey()
	if err != nil {
		return credentials{}, fmt.Errorf("egress credentials: %w", err)
	}
	return credentials{seed: k.Seed()}, nil
}

func (c credentials) of(plugin, server string) (string, error) {
	return egress.Credential(c.seed, plugin, server)
}

// startEgress starts the node's egress proxy; it closes when ctx ends.
func startEgress(ctx context.Context, d datadir.Dir, cfg config.Run, log *slog.Logger, met *metrics.Metrics) (daemon.Egress, error) {
	creds, err := nodeCredentials(d)
	if err != nil {
		return nil, err
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
	return &egressAdapter{p: p, d: d, creds: creds, eps: map[string]map[string]*openEndpoint{}, rules: map[string]egress.PluginRules{}}, nil
}

// managedRuntimes are the runtime folders plugins need read access to.
func managedRuntimes(d datadir.Dir) []string {
	rs, err := installed.Runtimes(d)
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
		return pluginuser.Prepare(d, p.Installed.Name, u.UID, u.GID, nodeBinary)
	}
}
