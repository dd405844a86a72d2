package egress

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"

	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/sandbox"
)

// Want is one endpoint a plugin needs (sandbox.Endpoint).
type Want = sandbox.Endpoint

// SocketPath is where the endpoint of a plugin's server ("" its own) listens:
// under datadir's EgressSocketDir, a server's in its EgressServerSocketDir.
func SocketPath(d datadir.Dir, plugin, server string) string {
	if server == "" {
		return filepath.Join(d.EgressSocketDir(plugin), sandbox.ProxySocket)
	}
	return filepath.Join(d.EgressServerSocketDir(plugin, server), sandbox.ProxySocket)
}

// NodeCredential is the credential of a plugin's server's host-loopback endpoint
// ("" its own), derived from the node's key: the node, and exec or hook beside
// it, derive the same one without handing it out.
func NodeCredential(d datadir.Dir, plugin, server string) (string, error) {
	k, err := d.EnsureKey()
	if err != nil {
		return "", fmt.Errorf("egress credentials: %w", err)
	}
	return Credential(k.Seed(), plugin, server)
}

// Endpoints are a proxy's endpoints by plugin and server: the one map from a
// plugin's server to its socket, host-loopback port and credential. The running
// node keeps every plugin's here; exec and hook, without a node, the one they
// serve.
type Endpoints struct {
	p  *Proxy
	d  datadir.Dir
	mu sync.Mutex
	// eps: plugin → server ("" its own) → open endpoint.
	eps   map[string]map[string]*openEndpoint
	rules map[string]PluginRules
}

type openEndpoint struct {
	ep         Endpoint
	want       Want
	credential string
}

// NewEndpoints keeps the endpoints of proxy p for the data folder d.
func NewEndpoints(p *Proxy, d datadir.Dir) *Endpoints {
	return &Endpoints{p: p, d: d, eps: map[string]map[string]*openEndpoint{}, rules: map[string]PluginRules{}}
}

// Set sets a plugin's lists and secrets (live) and makes its endpoints exactly
// want: each a socket (SocketPath) and, where HostPort, a host-loopback port that
// requires the endpoint's credential. Endpoints no longer wanted, or wanted
// otherwise, close.
func (e *Endpoints) Set(rules PluginRules, want []Want) error {
	plugin := rules.Plugin
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rules[plugin] = rules
	have := e.eps[plugin]
	if have == nil {
		have = map[string]*openEndpoint{}
		e.eps[plugin] = have
	}
	var errs []error
	if len(have) > 0 {
		if err := e.p.UpdatePlugin(rules); err != nil {
			errs = append(errs, err)
		}
	}
	wanted := map[string]Want{}
	for _, w := range want {
		wanted[w.Server] = w
	}
	for server, oe := range have {
		if w, ok := wanted[server]; !ok || w != oe.want {
			e.p.CloseEndpoint(oe.ep)
			delete(have, server)
		}
	}
	// Two servers whose folders would be one would share an endpoint: neither
	// gets one (their names hash alike; renaming one fixes it).
	dirs := map[string][]string{}
	for _, w := range want {
		dirs[SocketPath(e.d, plugin, w.Server)] = append(dirs[SocketPath(e.d, plugin, w.Server)], w.Server)
	}
	// The plugin's own first: its socket folder holds its servers' folders.
	ordered := append([]Want(nil), want...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Server == "" && ordered[j].Server != "" })
	for _, w := range ordered {
		if _, ok := have[w.Server]; ok {
			continue
		}
		if same := dirs[SocketPath(e.d, plugin, w.Server)]; len(same) > 1 {
			errs = append(errs, fmt.Errorf("plugin %s: servers %q share an egress socket folder; none of them gets an endpoint", plugin, same))
			continue
		}
		at := Listen{Socket: SocketPath(e.d, plugin, w.Server), SocketGroup: int(w.GID), Server: w.Server, TCP: w.HostPort}
		if w.HostPort {
			cred, err := NodeCredential(e.d, plugin, w.Server)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			at.Credential = cred
		}
		ep, err := e.p.AddPlugin(rules, at)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		have[w.Server] = &openEndpoint{ep: ep, want: w, credential: at.Credential}
	}
	return errors.Join(errs...)
}

// Endpoint is the host-loopback port of a plugin's server's endpoint ("" its
// own) and the credential it requires; port 0 when it has none.
func (e *Endpoints) Endpoint(plugin, server string) (port int, credential string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	oe := e.eps[plugin][server]
	if oe == nil || !oe.want.HostPort {
		return 0, ""
	}
	return int(oe.ep.TCP.Port()), oe.credential
}

// Open reports whether the endpoint of a plugin's server ("" its own) is open.
func (e *Endpoints) Open(plugin, server string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eps[plugin][server] != nil
}

// Rules are a plugin's lists as last set.
func (e *Endpoints) Rules(plugin string) (PluginRules, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.rules[plugin]
	return r, ok
}

// RemovePlugin closes a plugin's endpoints and forgets its lists.
func (e *Endpoints) RemovePlugin(plugin string) {
	e.mu.Lock()
	delete(e.eps, plugin)
	delete(e.rules, plugin)
	e.mu.Unlock()
	e.p.RemovePlugin(plugin)
}
