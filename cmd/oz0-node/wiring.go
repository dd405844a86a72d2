package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/config"
	"oz0.ai/node/node/daemon"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/installed"
	"oz0.ai/node/node/metrics"
)

// startEgress starts the node's egress proxy; it closes when ctx ends.
func startEgress(ctx context.Context, d datadir.Dir, cfg config.Run, log *slog.Logger, met *metrics.Metrics,
	stream *audit.Stream, ask func(context.Context, egress.Question) egress.Answer, span func(api.EgressDecision)) (*egress.Service, error) {
	if _, err := d.EnsureKey(); err != nil {
		return nil, fmt.Errorf("egress credentials: %w", err) // host-loopback endpoints derive theirs from it
	}
	// The CA the proxy puts secrets into TLS requests with (docs/promises.md §17).
	ca, err := egress.NodeCA(d)
	if err != nil {
		return nil, err
	}
	p, err := egress.New(egress.Config{TenantListPath: d.TenantList(), Audit: stream, Ask: ask, AllowCIDRs: cfg.AllowCIDRs, Logger: log, CA: ca,
		Observe: func(e api.EgressDecision) {
			met.Egress(e.Plugin, e.Decision, e.Rule, e.Bytes)
			if span != nil {
				span(e)
			}
		},
		OnRefuse:       met.EgressRefused,
		OnTenantReload: met.TenantReload,
	})
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	go func() { <-ctx.Done(); p.Close() }()
	return egress.NewService(p, d), nil
}

// lateDaemon hands what is made before the daemon (the audit stream, the proxy)
// to it once it exists: nothing reaches the proxy before the daemon opens
// endpoints, and a stream line written before then has no one to tell.
type lateDaemon struct{ d atomic.Pointer[daemon.Daemon] }

func (l *lateDaemon) auditWritten(r api.AuditRecord) {
	if d := l.d.Load(); d != nil {
		d.AuditWritten(r)
	}
}

func (l *lateDaemon) askEgress(ctx context.Context, q egress.Question) egress.Answer {
	if d := l.d.Load(); d != nil {
		return d.AskEgress(ctx, q)
	}
	return egress.Answer{Rule: "tenant"}
}

// nodeRuntimes are the managed runtime folders (Python, Node.js) plugins need
// read access to; every command that plans reads them here.
func nodeRuntimes(d datadir.Dir) ([]string, error) { return installed.Runtimes(d) }
