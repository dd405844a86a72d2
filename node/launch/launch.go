// Package launch is the one way anything starts in a plugin's sandbox: the
// running node's servers and hooks, `oz0-node exec` and `oz0-node hook` without a
// node all go through a Starter, which decides again now, opens the start's
// egress endpoint, builds the spec, makes the home, sets the plugin user's folder
// modes, attaches egress inside the sandbox and returns the process ready to
// start. A rule of where a sandbox may reach (a tier, a boundary) is one edit
// here, not one per caller (docs/architecture.md).
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"oz0.ai/node/node/hookrun"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/pluginuser"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
)

// Egress is where a start's egress endpoint comes from: the running node's own
// proxy (InProcess), a running node seen from another process (Outside), or a
// proxy the command serves itself for as long as it runs (Standalone).
type Egress interface {
	// Endpoint makes sure the endpoint of plugin p's server ("" its own, which its
	// hooks use) is open for a start decided as t (its backend and network), and
	// says how the sandbox reaches it.
	Endpoint(p *plan.Plugin, server string, t policy.Target) (plan.Proxy, error)
	// Attach lets a sandbox on the proxy network reach its endpoint through a
	// listener opened inside its own network namespace, and answers its DNS there
	// (transparent egress), where the backend and the node allow it; otherwise it
	// leaves the spec as it is and the in-sandbox bridge serves.
	Attach(spec *sandbox.Spec)
}

// Starter starts things in plugins' sandboxes on one node.
type Starter struct {
	Node *plan.Node
	// Learned gives what the running node has learned of its plugins (nil: none).
	Learned func() plan.Learned
	// Backend returns the working backend of a name (bwrap, gvisor, seatbelt,
	// none), or why it is not available.
	Backend func(name string) (sandbox.Backend, error)
	// Egress serves the starts' endpoints (nil: sandboxes on the proxy network get
	// no way out).
	Egress Egress
	// Unreachable, when set, is told that a plugin's user cannot reach its
	// folders (the running node keeps it, decides again and says why); when nil,
	// the start is decided again at once with that, so the plugin runs as the
	// node's user (docs/promises.md §8), and the why is logged.
	Unreachable func(plugin, why string)
}

// Start is one sandbox, decided and prepared, its process not yet started.
type Start struct {
	Plugin *plan.Plugin
	Target policy.Target
	Spec   *sandbox.Spec
	Proc   *sandbox.Process
	// Ctx is what the process lives under: the caller's context, for a hook
	// bounded by the hook's decided timeout.
	Ctx    context.Context
	cancel context.CancelFunc
}

// Close releases what the start holds once its process has ended (or was never
// started): what the backend set up, and a hook's deadline.
func (s *Start) Close() error {
	var err error
	if s.Proc != nil && s.Proc.Cleanup != nil {
		err = s.Proc.Cleanup()
	}
	if s.cancel != nil {
		s.cancel()
	}
	return err
}

// Plan decides for a plugin now, with what the node has learned.
func (s *Starter) Plan(plugin string) (*plan.Plugin, error) { return s.plan(plugin, "") }

// plan decides for a plugin now; unreachable, when not "", is why its user cannot
// reach its folders, learned by this start.
func (s *Starter) plan(plugin, unreachable string) (*plan.Plugin, error) {
	var l plan.Learned
	if s.Learned != nil {
		l = s.Learned()
	}
	if unreachable != "" {
		m := maps.Clone(l.UserUnreachable)
		if m == nil {
			m = map[string]string{}
		}
		m[plugin] = unreachable
		l.UserUnreachable = m
	}
	return s.Node.OneLearned(plugin, l)
}

// decided runs a start decided for plugin, and once more, as the node's user,
// when its user turns out not to reach its folders and no one keeps that.
func (s *Starter) decided(plugin string, do func(p *plan.Plugin) (*Start, error)) (*Start, error) {
	p, err := s.plan(plugin, "")
	if err != nil {
		return nil, err
	}
	st, err := do(p)
	ue, ok := Unreachable(err)
	if !ok {
		return st, err
	}
	if s.Unreachable != nil {
		s.Unreachable(plugin, ue.Error())
		return nil, err
	}
	slog.Warn("plugin user cannot reach its folders; running as the node's user", "plugin", plugin, "err", ue)
	if p, err = s.plan(plugin, ue.Error()); err != nil {
		return nil, err
	}
	return do(p)
}

// Server prepares a start of a plugin's (local) server. The process lives as
// long as ctx.
func (s *Starter) Server(ctx context.Context, plugin, server string) (*Start, error) {
	return s.decided(plugin, func(p *plan.Plugin) (*Start, error) { return s.server(ctx, p, server) })
}

func (s *Starter) server(ctx context.Context, p *plan.Plugin, server string) (*Start, error) {
	plugin := p.Installed.Name
	t, ok := p.Decision.Server(server)
	if !ok {
		return nil, fmt.Errorf("plugin %s has no server %q", plugin, server)
	}
	px, err := s.endpoint(p, server, t)
	if err != nil {
		return nil, err
	}
	spec, t, err := p.ServerSpec(server, px)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, p, t, spec, "", 0)
}

// Hook prepares a run of hook i of a plugin for an event about a tool that
// plugin owner serves (hookrun.Served; "" for the agent's own tools and events
// without a tool), with the session's project bound read-only where the operator
// granted it ("" for none). The run lives under ctx bounded by the hook's
// decided timeout (Start.Ctx).
func (s *Starter) Hook(ctx context.Context, plugin string, i int, owner, project string) (*Start, error) {
	return s.decided(plugin, func(p *plan.Plugin) (*Start, error) { return s.hook(ctx, p, i, owner, project) })
}

func (s *Starter) hook(ctx context.Context, p *plan.Plugin, i int, owner, project string) (*Start, error) {
	t, err := p.HookTarget(i, owner)
	if err != nil {
		return nil, err
	}
	px, err := s.endpoint(p, "", t)
	if err != nil {
		return nil, err
	}
	spec, t, err := p.HookSpec(i, owner, px)
	if err != nil {
		return nil, err
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = policy.HookTimeoutCap
	}
	return s.start(ctx, p, t, spec, project, timeout)
}

// Exec prepares argv in exactly the sandbox of a plugin's server ("" its first,
// or its hooks' for a plugin without servers).
func (s *Starter) Exec(ctx context.Context, plugin, server string, argv []string) (*Start, error) {
	return s.decided(plugin, func(p *plan.Plugin) (*Start, error) { return s.exec(ctx, p, server, argv) })
}

func (s *Starter) exec(ctx context.Context, p *plan.Plugin, server string, argv []string) (*Start, error) {
	if p.Decision.Refused != "" {
		return nil, fmt.Errorf("plugin %s is refused: %s", p.Installed.Name, p.Decision.Refused)
	}
	t, err := p.ExecTarget(server)
	if err != nil {
		return nil, err
	}
	px, err := s.endpoint(p, p.ExecServer(server), t)
	if err != nil {
		return nil, err
	}
	spec, t, err := p.ExecSpec(server, argv, px)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, p, t, spec, "", 0)
}

// endpoint opens the start's egress endpoint where its network goes through the
// proxy; an isolated or unsandboxed start gets none.
func (s *Starter) endpoint(p *plan.Plugin, server string, t policy.Target) (plan.Proxy, error) {
	if s.Egress == nil || t.Action != policy.Sandboxed || (t.Network != policy.NetProxy && t.Network != policy.NetHostProxyVars) {
		return plan.Proxy{}, nil
	}
	return s.Egress.Endpoint(p, server, t)
}

// start does what every start needs after the spec: the home, the plugin user's
// folder modes, the project, the backend, egress inside the sandbox, and the
// process, living under ctx (bounded by timeout when it is not 0).
func (s *Starter) start(ctx context.Context, p *plan.Plugin, t policy.Target, spec *sandbox.Spec, project string, timeout time.Duration) (*Start, error) {
	if err := p.EnsureHome(); err != nil {
		return nil, err
	}
	if err := p.EnsureView(spec); err != nil {
		return nil, err
	}
	if t.Action == policy.Sandboxed && t.User.PerPlugin {
		u := t.User
		// The node binary is the egress bridge inside bwrap and gVisor sandboxes;
		// a Landlock sandbox runs none, so it is not its user's to read.
		var readable []string
		if spec.Backend != policy.BackendLandlock {
			readable = append(readable, s.Node.NodeBinary)
		}
		if err := pluginuser.Prepare(s.Node.Dir, p.Installed.Name, u.UID, u.GID, readable...); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", p.Installed.Name, err)
		}
	}
	hookrun.WithProject(spec, project)
	if s.Backend == nil {
		return nil, fmt.Errorf("%s %s of plugin %s: no sandbox backends: %w", t.Kind, t.Name, p.Installed.Name, sandbox.ErrUnavailable)
	}
	be, err := s.Backend(spec.Backend)
	if err != nil {
		return nil, fmt.Errorf("%s %s of plugin %s: backend %s: %w", t.Kind, t.Name, p.Installed.Name, spec.Backend, err)
	}
	if s.Egress != nil {
		s.Egress.Attach(spec)
	}
	st := &Start{Plugin: p, Target: t, Spec: spec, Ctx: ctx}
	if timeout > 0 {
		st.Ctx, st.cancel = context.WithTimeout(ctx, timeout)
	}
	if st.Proc, err = be.Command(st.Ctx, spec); err != nil {
		st.Close()
		return nil, fmt.Errorf("%s %s of plugin %s: %w", t.Kind, t.Name, p.Installed.Name, err)
	}
	return st, nil
}

// Unreachable reports whether err says the plugin's user cannot reach its
// folders (pluginuser.UnreachableError): the running node then runs the plugin
// as its own user and says why (docs/promises.md §8).
func Unreachable(err error) (*pluginuser.UnreachableError, bool) {
	var ue *pluginuser.UnreachableError
	ok := errors.As(err, &ue)
	return ue, ok
}

// Backends is a Starter's Backend from a map of working backends by name.
func Backends(m map[string]sandbox.Backend) func(string) (sandbox.Backend, error) {
	return func(name string) (sandbox.Backend, error) {
		if b, ok := m[name]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("not available on this node: %w", sandbox.ErrUnavailable)
	}
}
