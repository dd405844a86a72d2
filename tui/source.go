package tui

import (
	"context"

	"oz0.ai/node/node/api"
)

// Source is what the TUI reads the node through: the control API's event stream and
// its two actions. The socket implementation is the real one; tests may pass any.
type Source interface {
	// Events streams the node's events; the first is a full status. The channel
	// closes when the node goes away or ctx ends.
	Events(ctx context.Context) (<-chan api.Event, error)
	Restart(ctx context.Context, plugin, server string) error
	Logs(ctx context.Context, plugin, server string, n int) ([]string, error)
	// Follow streams a server's log lines (its recent ones first) until ctx ends
	// or the node closes the stream.
	Follow(ctx context.Context, plugin, server string) (<-chan string, error)
}

// Operator is a Source that also answers approvals and reads the audit stream's
// latest lines; the socket's does.
type Operator interface {
	// Answer answers an approval: api.AnswerOnce, AnswerAlways or AnswerDeny.
	Answer(ctx context.Context, id, answer, via string) error
	// Audit is the audit stream's last n lines, oldest first.
	Audit(ctx context.Context, n int) ([]api.AuditRecord, error)
}

// socketSource is a Source on the node's control socket: the control API's own
// client, with the log pane's backlog.
type socketSource struct {
	*api.Client
}

// NewSocketSource returns the Source for the control socket at path.
func NewSocketSource(socket string) Source {
	return &socketSource{Client: api.NewClient(socket)}
}

// followBacklog is how many earlier lines the log pane starts with.
const followBacklog = 200

// Follow streams a server's log, starting with its last followBacklog lines.
func (s *socketSource) Follow(ctx context.Context, plugin, server string) (<-chan string, error) {
	return s.Client.Follow(ctx, plugin, server, followBacklog)
}
