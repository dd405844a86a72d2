package main

import (
	"github.com/spf13/cobra"

	"oz0.ai/node/node/config"
)

// runFlags are the flags shared by `run` and `service install`: both validate them
// through config.Parse.
type runFlags struct {
	f config.Flags
}

func (r *runFlags) add(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&r.f.Mode, "plugin-sandbox", "strict", "sandbox mode: strict, auto or off")
	fs.StringArrayVar(&r.f.Exempt, "plugin-sandbox-exempt", nil,
		"exempt a plugin: NAME (whatever is installed under that name) or NAME@COMMIT (one version); repeatable, comma-separated")
	fs.StringVar(&r.f.Backend, "backend", "auto", "sandbox backend: auto, bwrap, gvisor, landlock, seatbelt or none")
	fs.StringArrayVar(&r.f.PluginBackends, "plugin-backend", nil, "raise a plugin to a stronger backend: NAME=gvisor; repeatable")
	fs.StringArrayVar(&r.f.Labels, "label", nil, "operator label key=value published in status; repeatable")
	fs.StringArrayVar(&r.f.AllowCIDRs, "egress-allow-cidr", nil, "let the egress proxy reach this range despite the SSRF guard (operator only); repeatable")
	fs.StringArrayVar(&r.f.HooksSee, "plugin-hooks-see", nil,
		"let WATCHER's hooks see OTHER's tool calls (arguments and results) and block them: WATCHER=OTHER; repeatable, comma-separated")
	fs.StringArrayVar(&r.f.HooksProject, "plugin-hooks-project", nil,
		"let PLUGIN's hooks read the agent session's project (its cwd) read-only; repeatable, comma-separated")
	fs.StringVar(&r.f.MCPListen, "mcp-listen", "", "also serve MCP over HTTP on this loopback address (bearer token in the data folder)")
	fs.StringVar(&r.f.MetricsListen, "metrics-listen", "", "also serve Prometheus metrics (GET /metrics) over HTTP on this loopback address, e.g. 127.0.0.1:9464")
	fs.IntVar(&r.f.NotifyRate, "server-notify-rate", 0, "notifications a second each MCP server may send before the rest are dropped and counted; 0 is the default, 200")
	fs.StringArrayVar(&r.f.TrustD, "plugin-tls-trustd", nil,
		"macOS: let this plugin's sandboxes reach the certificate trust daemon, which TLS through Security.framework needs (Go, Rust native-tls) and which reaches the network outside the proxy; repeatable")
}

func (r *runFlags) parse(g *globals) (config.Run, error) {
	f := r.f
	f.DataDir = g.dataDir
	c, err := config.Parse(f)
	if err != nil {
		return config.Run{}, &usageError{err}
	}
	return c, nil
}
