package egress

import "context"

// Question is a connection waiting for an operator: only the tenant's list
// refuses it, and the manifest allows the host.
type Question struct {
	Plugin, Server string
	Host           string
	Port           int
	// Refusal is why it is refused unless an operator allows it.
	Refusal string
}

// Answer is the operator's, or the end of the wait: allowed or not, and the rule
// the audit line and a refused client get.
type Answer struct {
	Allow bool
	Rule  string
}

// ask holds a connection that only the tenant's list refuses until Config.Ask
// answers. While it waits its target is unset, so a change of the lists does not
// count it; once allowed it is marked approved and its target set again.
func (p *Proxy) ask(s *session, t Target, cancel context.CancelFunc, v verdict) verdict {
	s.setTarget(nil, nil)
	a := p.cfg.Ask(context.Background(), Question{Plugin: s.plugin.name, Server: s.server, Host: t.Host, Port: t.Port,
		Refusal: "the tenant's list does not name " + t.String()})
	if !a.Allow {
		return verdict{rule: a.Rule, why: v.why + "An operator was asked and did not allow it: " + a.Rule + "\n"}
	}
	s.mu.Lock()
	s.approved = true
	s.mu.Unlock()
	s.setTarget(&t, cancel)
	return verdict{allow: true, rule: a.Rule}
}

func (s *session) isApproved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.approved
}
