package daemon

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/plan"
	"oz0.ai/node/node/sandbox"
	"oz0.ai/node/node/serverconn"
)

// launchRemote connects to a remote MCP server through its egress endpoint
// (serverconn.Remote).
func (d *Daemon) launchRemote(ctx context.Context, p *plan.Plugin, s *manifest.Server, stderr io.Writer) (*mcpSession, error) {
	plugin, server := p.Installed.Name, s.Name
	if d.cfg.Egress == nil {
		return nil, fmt.Errorf("server %s/%s is remote and the node runs no egress proxy to reach it through", plugin, server)
	}
	progress := &serverconn.ProgressWatch{}
	tr := serverconn.Remote(s.Remote, d.remoteSocket(plugin, server),
		serverconn.Limits{Max: d.maxResult(), TooLarge: d.resultTooLarge(plugin, server), Notes: d.noteLimiter(plugin, server), Progress: progress})
	// The SSE transport keeps its event stream on the context it connects with, so
	// that is the server's own (it ends when the server is stopped); the client's
	// dial and response-header timeouts bound a server that does not answer.
	cs, err := d.gw.Client(plugin, server).Connect(ctx, tr, gateway.SessionOptions())
	if err != nil {
		// The URL and headers may carry the operator's secrets, and the client's
		// errors quote the URL: what is shown and logged has them redacted.
		err = fmt.Errorf("server %s/%s: connect to remote %s server at %s: %s", plugin, server, s.Remote.Type, hostOf(s.Remote.URL), p.Redact(err.Error()))
		fmt.Fprintln(stderr, err)
		return nil, err
	}
	return &mcpSession{cs: cs, order: progress}, nil
}

// remoteSocket is the egress endpoint a remote server's connections go through:
// the server's own, whose list is its URL's host alone and whose audit lines
// name it.
func (d *Daemon) remoteSocket(plugin, server string) string {
	return filepath.Join(d.cfg.Node.Dir.EgressServerSocketDir(plugin, server), sandbox.ProxySocket)
}

func hostOf(raw string) string {
	if u, err := manifest.ParseRemoteURL(raw); err == nil {
		return u.Host
	}
	return "its URL"
}
