package launch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// NodeProxy is the running node's egress proxy as a start in the node's own
// process needs it.
type NodeProxy interface {
	// Endpoint is the host-loopback port of a plugin's server's endpoint ("" its
	// own) and the credential it requires; port 0 when it has none.
	Endpoint(plugin, server string) (port int, credential string)
	// ListenIn serves that endpoint on addr inside a sandbox's network namespace
	// (a /proc/PID/ns/net path); detach closes it.
	ListenIn(plugin, server, netnsPath, addr string) (detach func(), err error)
}

// InProcess is the running node's own proxy: the node opened every plugin's
// endpoints when it planned them, and opens a bwrap sandbox's listener inside
// the sandbox's network namespace itself (a non-root node through a helper it
// starts with nsenter, egress.OpenNetns).
type InProcess struct {
	Proxy NodeProxy
	Root  bool
	Log   *slog.Logger
	// nsenterMissing logs once that a non-root node cannot serve bwrap sandboxes
	// transparent egress.
	nsenterMissing sync.Once
}

// Endpoint implements Egress.
func (e *InProcess) Endpoint(p *plan.Plugin, server string, _ policy.Target) (plan.Proxy, error) {
	port, cred := e.Proxy.Endpoint(p.Installed.Name, server)
	return plan.Proxy{Sockets: true, Port: port, Credential: cred}, nil
}

// Attach implements Egress: a bwrap sandbox reaches the proxy through a listener
// the node opens inside its network namespace instead of the in-sandbox bridge
// (one process and one hop fewer; bench: EgressFromSandbox). gVisor keeps the
// bridge: its loopback lives in its own network stack, where the bridge is also
// the sandbox's gate for transparent egress.
func (e *InProcess) Attach(spec *sandbox.Spec) {
	if !proxied(spec) {
		return
	}
	if spec.Backend == policy.BackendGVisor {
		spec.Proxy.Resolver = sandbox.ResolverAddr
		return
	}
	if spec.Backend != policy.BackendBwrap {
		return
	}
	if !e.Root && !egress.NsenterAvailable() {
		e.nsenterMissing.Do(func() {
			e.log().Warn("nsenter (util-linux) not found: bwrap sandboxes get no transparent egress, only the proxy variables")
		})
		return
	}
	plugin, server, addr := spec.Plugin, spec.Server, "127.0.0.1:"+strconv.Itoa(spec.Proxy.Port)
	spec.Proxy.Attach = func(ns string) (func(), error) {
		return e.Proxy.ListenIn(plugin, server, ns, addr)
	}
	// The node also answers the sandbox's DNS there (transparent egress).
	spec.Proxy.Resolver = sandbox.ResolverAddr
}

func (e *InProcess) log() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

// proxied reports whether a spec's sandbox reaches the proxy through a socket
// bound into its own network namespace.
func proxied(spec *sandbox.Spec) bool {
	return spec.Network == policy.NetProxy && spec.Proxy != nil && spec.Proxy.SocketDir != ""
}

// Outside is a running node seen from another process (exec, hook): the node
// serves every plugin's endpoints, so a sandbox binds that node's socket folder,
// or, where it reaches the proxy on the host's loopback (auto, Seatbelt), is
// pointed at that node's port with the endpoint's credential, which is derived
// from the node's key as the node derives it.
type Outside struct {
	Dir datadir.Dir
}

// Endpoint implements Egress.
func (e Outside) Endpoint(p *plan.Plugin, server string, t policy.Target) (plan.Proxy, error) {
	px := plan.Proxy{Sockets: true}
	if !sandbox.HostPort(p.OS(), t.Backend, t.Network) {
		return px, nil
	}
	name := p.Installed.Name
	var err error
	if px.Credential, err = egress.NodeCredential(e.Dir, name, server); err != nil {
		return px, err
	}
	if px.Port, err = NodeProxyPort(e.Dir, name, server); err != nil {
		return px, err
	}
	return px, nil
}

// Attach implements Egress (attachHandOff).
func (e Outside) Attach(spec *sandbox.Spec) { attachHandOff(spec) }

// NodeProxyPort asks the running node for the host-loopback port of a plugin's
// server's egress endpoint ("" for the plugin's own).
func NodeProxyPort(d datadir.Dir, plugin, server string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := api.NewClient(d.Control()).Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("ask the running node for plugin %s's egress endpoint: %w", plugin, err)
	}
	for _, pl := range st.Plugins {
		if pl.Name != plugin {
			continue
		}
		if server == "" && pl.ProxyPort > 0 {
			return pl.ProxyPort, nil
		}
		for _, s := range pl.Servers {
			if s.Name == server && s.ProxyPort > 0 {
				return s.ProxyPort, nil
			}
		}
	}
	return 0, fmt.Errorf("the running node has no egress endpoint for plugin %s (server %q) yet (it opens one when it takes up the plugin; try again in a moment)", plugin, server)
}

// Standalone is a proxy the command serves itself, without a node, for as long
// as it runs (Close): each plugin's endpoints with the manifest's lists and the
// tenant's list as they stand, a host-loopback port only where a sandbox needs
// one. It follows the tenant list by polling its stat: an inotify watch would
// cost every exec or hook the kernel's ~10 ms to tear it down at exit
// (docs/performance.md).
type Standalone struct {
	Dir datadir.Dir

	mu   sync.Mutex
	px   *egress.Proxy
	eps  *egress.Endpoints
	want map[string][]egress.Want // by plugin: the endpoints opened so far
	ca   bool                     // the node's CA is loaded
}

// StandaloneTenantPoll is how often a standalone proxy reads the tenant list's
// stat: a host taken off the list is refused within about this plus a read.
const StandaloneTenantPoll = 25 * time.Millisecond

// Endpoint implements Egress.
func (e *Standalone) Endpoint(p *plan.Plugin, server string, t policy.Target) (plan.Proxy, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	name := p.Installed.Name
	if e.px == nil {
		audit := ""
		if fi, err := os.Stat(e.Dir.Logs()); err == nil && fi.IsDir() {
			audit = e.Dir.Audit()
		}
		quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		px, err := egress.New(egress.Config{TenantListPath: e.Dir.TenantList(), AuditPath: audit, Logger: quiet,
			PollOnly: true, PollInterval: StandaloneTenantPoll})
		if err != nil {
			return plan.Proxy{}, fmt.Errorf("egress proxy: %w", err)
		}
		e.px, e.eps, e.want = px, egress.NewEndpoints(px, e.Dir), map[string][]egress.Want{}
	}
	if !e.ca && len(p.EgressRules().Secrets) > 0 {
		// The node's CA, for the secrets this plugin has (docs/promises.md §17);
		// read only when one does, as it costs every exec a read of the roots.
		ca, err := egress.NodeCA(e.Dir)
		if err != nil {
			return plan.Proxy{}, fmt.Errorf("egress proxy: %w", err)
		}
		e.px.UseCA(ca)
		e.ca = true
	}
	w := egress.Want{Server: server, HostPort: sandbox.HostPort(p.OS(), t.Backend, t.Network)}
	if p.Decision.User.PerPlugin {
		w.GID = p.Decision.User.GID
	}
	have := e.want[name]
	if i := slices.IndexFunc(have, func(h egress.Want) bool { return h.Server == server }); i < 0 || (w.HostPort && !have[i].HostPort) {
		if i >= 0 {
			have = slices.Delete(slices.Clone(have), i, i+1)
		}
		have = append(have, w)
		if err := e.eps.Set(p.EgressRules(), have); err != nil {
			return plan.Proxy{}, fmt.Errorf("egress endpoint for plugin %s: %w", name, err)
		}
		e.want[name] = have
	}
	port, cred := e.eps.Endpoint(name, server)
	return plan.Proxy{Sockets: true, Port: port, Credential: cred}, nil
}

// Attach implements Egress (attachHandOff).
func (e *Standalone) Attach(spec *sandbox.Spec) { attachHandOff(spec) }

// Close stops the proxy and closes its endpoints.
func (e *Standalone) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.px != nil {
		e.px.Close()
	}
}
