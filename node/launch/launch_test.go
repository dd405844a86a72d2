package launch

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"oz0.ai/node/fixtures"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/policy"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/sandbox/probe"
)

// recorder stands in for a backend's runner only: it keeps the spec it was
// given (what this package builds) and prepares a process that does nothing.
type recorder struct{ specs []*sandbox.Spec }

func (r *recorder) Name() string { return policy.BackendBwrap }
func (r *recorder) Probe(context.Context) sandbox.Probe {
	return sandbox.Probe{Name: r.Name(), Works: true}
}
func (r *recorder) Render(*sandbox.Spec) (string, error) { return "", nil }
func (r *recorder) Command(ctx context.Context, s *sandbox.Spec) (*sandbox.Process, error) {
	r.specs = append(r.specs, s)
	return sandbox.Direct{}.Command(ctx, &sandbox.Spec{Argv: []string{"/bin/true"}, Dir: "/", Home: "/", Backend: policy.BackendNone})
}

// comparable is a spec without what differs by where its egress comes from: the
// closure that attaches the endpoint inside the sandbox (the node's proxy in its
// process, or a hand-off to the socket).
func comparable(s *sandbox.Spec) sandbox.Spec {
	c := *s
	if c.Proxy != nil {
		px := *c.Proxy
		px.Attach = nil
		c.Proxy = &px
	}
	return c
}

// The four ways a sandbox is started — the running node's servers and hooks,
// exec, and a hook without a node — take one path, so for the same plugin, mode
// and tier they build the same sandbox: the server's for the node and for exec of
// that server (only the command and kind differ), a hook's for the node and by
// itself, for a call of the plugin's own tool and for the agent's data alike.
func TestEveryStartBuildsTheSameSandbox(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(os.Geteuid() == 0); err != nil {
		t.Fatal(err)
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	if _, err := fixtures.Extract("claude-hooks", d.PluginCommit("claude-hooks", commit)); err != nil {
		t.Fatal(err)
	}
	if err := installed.Activate(d, installed.Meta{Name: "claude-hooks", Commit: commit, Source: "test", InstalledAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	n := plan.New(d, config.Run{DataDir: d.Root, Mode: policy.Strict}, probe.Assume("linux", policy.BackendBwrap, false), nil)
	rec := &recorder{}
	backend := Backends(map[string]sandbox.Backend{policy.BackendBwrap: rec})
	ctx := context.Background()
	argv := []string{"/bin/sh", "-c", "true"}

	type built struct{ server, exec, own, agent *sandbox.Spec }
	run := func(s *Starter, viaExec func() (*Start, error)) built {
		t.Helper()
		var b built
		for _, step := range []struct {
			out *(*sandbox.Spec)
			do  func() (*Start, error)
		}{
			{&b.server, func() (*Start, error) { return s.Server(ctx, "claude-hooks", "notes") }},
			{&b.exec, viaExec},
			{&b.own, func() (*Start, error) { return s.Hook(ctx, "claude-hooks", 0, "claude-hooks", "") }},
			{&b.agent, func() (*Start, error) { return s.Hook(ctx, "claude-hooks", 0, "", "") }},
		} {
			if step.do == nil {
				continue
			}
			st, err := step.do()
			if err != nil {
				t.Fatal(err)
			}
			*step.out = st.Spec
			st.Close()
		}
		return b
	}

	// The running node: its own proxy, its endpoints opened when it planned.
	px, err := egress.New(egress.Config{TenantListPath: d.TenantList()})
	if err != nil {
		t.Fatal(err)
	}
	svc := egress.NewService(px, d)
	p, err := n.One("claude-hooks")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Set(p.EgressRules(), p.Endpoints()); err != nil {
		t.Fatal(err)
	}
	node := &Starter{Node: n, Backend: backend, Egress: &InProcess{Proxy: svc, Root: n.Root}}
	fromNode := run(node, nil)
	px.Close()

	// exec and hook without a node: a proxy of their own.
	alone := &Standalone{Dir: d}
	s := &Starter{Node: n, Backend: backend, Egress: alone}
	fromAlone := run(s, func() (*Start, error) { return s.Exec(ctx, "claude-hooks", "notes", argv) })
	alone.Close()

	// exec beside a running node (its sockets, seen from outside).
	o := &Starter{Node: n, Backend: backend, Egress: Outside{Dir: d}}
	fromOutside := run(o, func() (*Start, error) { return o.Exec(ctx, "claude-hooks", "notes", argv) })

	if len(rec.specs) != 11 { // the node 3 (no exec), standalone 4, outside 4
		t.Fatalf("%d sandboxes prepared; want 11", len(rec.specs))
	}
	server := comparable(fromNode.server)
	if server.Proxy == nil || server.Proxy.SocketDir != d.EgressServerSocketDir("claude-hooks", "notes") {
		t.Fatalf("the node's server sandbox has no endpoint of its own: %+v", server.Proxy)
	}
	for name, b := range map[string]built{"standalone": fromAlone, "outside": fromOutside} {
		for what, got := range map[string]*sandbox.Spec{"server": b.server, "exec": b.exec} {
			c := comparable(got)
			if what == "exec" {
				c.Argv, c.Kind = server.Argv, server.Kind
			}
			if !reflect.DeepEqual(c, server) {
				t.Errorf("%s %s sandbox differs from the node's server:\n%+v\nwant\n%+v", name, what, c, server)
			}
		}
		for what, pair := range map[string][2]*sandbox.Spec{"own tool": {b.own, fromNode.own}, "agent's data": {b.agent, fromNode.agent}} {
			if got, want := comparable(pair[0]), comparable(pair[1]); !reflect.DeepEqual(got, want) {
				t.Errorf("%s hook sandbox (%s) differs from the node's:\n%+v\nwant\n%+v", name, what, got, want)
			}
		}
	}
	if fromNode.own.Network != policy.NetProxy || fromNode.own.Proxy == nil {
		t.Errorf("hook on its own tool: network %s, proxy %+v; want the plugin's endpoint", fromNode.own.Network, fromNode.own.Proxy)
	}
	if fromNode.agent.Network != policy.NetIsolated || fromNode.agent.Proxy != nil {
		t.Errorf("hook on the agent's data: network %s, proxy %+v; want isolated", fromNode.agent.Network, fromNode.agent.Proxy)
	}
}
