package egress

import (
	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
)

// Service is the running node's proxy as the node uses it: per plugin, the
// endpoints Endpoints keeps (its own, its hooks', and one per server), endpoints
// opened inside a sandbox's network namespace (ListenIn), and the proxy's counts,
// decisions and findings for status.
type Service struct {
	*Endpoints
	p *Proxy
}

// NewService serves p's endpoints under the data folder d.
func NewService(p *Proxy, d datadir.Dir) *Service {
	return &Service{Endpoints: NewEndpoints(p, d), p: p}
}

// Counts are a plugin's allowed and denied connections.
func (s *Service) Counts(plugin string) (allowed, denied int64) {
	st, _ := s.p.Stats(plugin)
	return st.Allowed, st.Denied
}

// Refusals counts the connections a plugin's sandboxes had turned away before
// any decision, by cause: "conn-cap" (its open-connection cap), "credential".
func (s *Service) Refusals(plugin string) map[string]int64 {
	st, _ := s.p.Stats(plugin)
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

// Recent are the latest n decisions, newest first.
func (s *Service) Recent(n int) []api.EgressDecision { return s.p.Recent(n) }

// Findings are the proxy's own (a tenant list that cannot be used, caps).
func (s *Service) Findings() []api.Finding { return s.p.Findings() }

// Tenant returns the tenant list's patterns as loaded and whether it loaded.
func (s *Service) Tenant() (patterns []string, ok bool) {
	st := s.p.Status(0)
	return st.Patterns, st.TenantOK
}

// Subscribe streams decisions for the node's event stream.
func (s *Service) Subscribe() (<-chan api.EgressDecision, func()) { return s.p.Subscribe(256) }

// Close closes the proxy (Proxy.Close): its last decisions reach the audit
// stream before it returns.
func (s *Service) Close() error { return s.p.Close() }
