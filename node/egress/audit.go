package egress

import (
	"log/slog"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/audit"
)

// auditLog is where the proxy's decisions go: the node's one audit stream
// (node/audit), as lines of kind "egress" with the api.EgressDecision fields. A
// stream given in Config.Audit is shared and its owner closes it; one opened
// from Config.AuditPath is the proxy's own and closes with it.
type auditLog struct {
	s   *audit.Stream
	own bool
}

// DefaultAuditMaxBytes and DefaultAuditKeep bound a stream the proxy opens
// itself at (1 + keep) × max bytes on disk.
const (
	DefaultAuditMaxBytes = audit.DefaultMaxBytes
	DefaultAuditKeep     = audit.DefaultKeep
)

func openAudit(path string, maxBytes int64, keep int, log *slog.Logger) (*auditLog, error) {
	s, err := audit.Open(path, audit.Options{MaxBytes: maxBytes, Keep: keep, Logger: log})
	if err != nil {
		return nil, err
	}
	return &auditLog{s: s, own: true}, nil
}

func (a *auditLog) add(d api.EgressDecision) {
	if a != nil {
		a.s.Add(api.AuditOfEgress(d))
	}
}

func (a *auditLog) close() {
	if a != nil && a.own {
		a.s.Close()
	}
}
