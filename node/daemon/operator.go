package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/approval"
	"oz0.ai/node/node/audit"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/egress"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/manifest"
	"oz0.ai/node/node/peer"
	"oz0.ai/node/node/termtext"
)

// Tracer exports what the node does as traces (node/otel); nil: no tracing, at
// no cost.
type Tracer interface {
	ToolCall(r *gateway.CallRecord, argsDigest string)
	HookRun(run api.HookRun, session string)
	Egress(d api.EgressDecision)
}

// The operator's side of the node: the audit stream's lines for calls, hook runs
// and approvals (egress writes its own), traces, and the approvals waiting
// (docs/operators.md, "Audit", "Approvals").

// observeCall is the gateway's Observe: one audit line per tools/call and its
// span.
func (d *Daemon) observeCall(r *gateway.CallRecord) {
	digest := audit.ArgsDigest(r.Args)
	if d.cfg.Audit != nil {
		d.cfg.Audit.Add(api.AuditRecord{
			Time: r.Start.UTC().Format(time.RFC3339Nano), Kind: "call", Door: r.Door, Path: r.Path, Session: r.Session,
			RequestID: r.RequestID, Plugin: r.Plugin, Server: r.Server, Tool: r.Tool, Decision: r.Decision, Rule: r.Reason,
			Outcome: r.Outcome, RPCError: r.RPCError, ResultBytes: r.ResultBytes, ArgsSHA256: digest, Seconds: r.Took.Seconds(),
		})
	}
	if d.cfg.Tracer != nil {
		d.cfg.Tracer.ToolCall(r, digest)
	}
}

// auditHook writes a hook run's line and span.
func (d *Daemon) auditHook(run api.HookRun, session string) {
	if d.cfg.Audit != nil {
		d.cfg.Audit.Add(api.AuditOfHook(run, session))
	}
	if d.cfg.Tracer != nil {
		d.cfg.Tracer.HookRun(run, session)
	}
}

// AuditWritten publishes a line of the audit stream once written (the stream's
// OnWrite): the TUI's audit view follows them.
func (d *Daemon) AuditWritten(r api.AuditRecord) {
	d.mu.Lock()
	followed := len(d.subs) > 0
	d.mu.Unlock()
	if followed { // else the event is not made: one a call
		// A copy: taking r's own address would move every call's record to
		// the heap, followed or not.
		line := r
		d.publish(api.Event{Type: "audit", Audit: &line})
	}
}

// newBook is the approvals' book, with what an answer does in this node.
func (d *Daemon) newBook(wait time.Duration) *approval.Book {
	return &approval.Book{Wait: wait, OnChange: d.changed, Always: d.always,
		OnEnd: func(a api.Approval, o approval.Outcome) {
			d.log.Info("approval", "id", a.ID, "kind", a.Kind, "plugin", a.Plugin, "server", a.Server, "tool", a.Tool,
				"host", a.Host, "port", a.Port, "answer", o.Answer, "by", o.By, "asked", a.Asked)
			if d.cfg.Audit != nil {
				rule := a.Refusal
				if o.Answer == "timeout" {
					rule = fmt.Sprintf("no operator answered within %v: %s", wait, a.Refusal)
				}
				d.cfg.Audit.Add(api.AuditRecord{Kind: "approval", Approval: a.ID, Plugin: a.Plugin, Server: a.Server, Tool: a.Tool,
					Host: a.Host, Port: a.Port, Decision: o.Answer, Rule: rule, By: o.By, Asked: a.Asked})
			}
		}}
}

// always makes an "allow always" last: one line in the tenant's file, after a
// comment saying who and when, written atomically.
func (d *Daemon) always(r approval.Request, by string) error {
	hostPort := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	what, path, line, mode := hostPort, d.cfg.Node.Dir.TenantList(), hostPort, os.FileMode(0o644)
	if r.Kind == "tool" {
		what, path, line, mode = r.Tool, d.cfg.Node.Dir.ToolRules(), "allow "+r.Tool, 0o600
	}
	who := "plugin " + r.Plugin
	if r.Server != "" {
		who += " server " + r.Server
	}
	// Plugin-written names on one line, with nothing that could end it.
	who = strings.Join(strings.Fields(termtext.Line(who)), " ")
	comment := fmt.Sprintf("allowed always by %s at %s: %s asked for %s", by, time.Now().UTC().Format(time.RFC3339), who, what)
	if err := datadir.AppendTenantLine(path, comment, line, mode); err != nil {
		return err
	}
	if r.Kind == "tool" {
		// In force now: the next call of the tool is not asked about again
		// while the watcher settles the file. (The file was written whole.)
		d.applyToolRules(datadir.ReadToolRules(path))
	}
	d.log.Info("approval: allowed always", "file", path, "line", line, "by", by)
	return nil
}

// outcomeRule is what an approval's end says in a call's or a connection's
// audit line.
func outcomeRule(o approval.Outcome, wait time.Duration, refusal string) string {
	switch o.Answer {
	case api.AnswerOnce, api.AnswerAlways:
		return fmt.Sprintf("approved %s by %s (approval %s)", o.Answer, o.By, o.ID)
	case api.AnswerDeny:
		return fmt.Sprintf("denied by %s (approval %s): %s", o.By, o.ID, refusal)
	case "timeout":
		return fmt.Sprintf("no operator answered within %v (approval %s): %s", wait, o.ID, refusal)
	}
	return fmt.Sprintf("the caller went away while waiting for an operator (approval %s): %s", o.ID, refusal)
}

// askTool holds a refused tool call for an operator's answer.
func (d *Daemon) askTool(ctx context.Context, c gateway.Call, refusal string, always bool) gateway.Verdict {
	o := d.book.Ask(ctx, approval.Request{Kind: "tool", Plugin: c.Plugin, Server: c.Server, Tool: c.Tool, Refusal: refusal, Always: always})
	return gateway.Verdict{OK: o.Allowed(), Reason: outcomeRule(o, d.book.Wait, refusal)}
}

// AskEgress is the proxy's Ask: a connection only the tenant's list refuses
// waits for an operator; without approvals it is refused as the list says.
func (d *Daemon) AskEgress(ctx context.Context, q egress.Question) egress.Answer {
	if d.book == nil {
		return egress.Answer{Rule: "tenant"}
	}
	o := d.book.Ask(ctx, approval.Request{Kind: "egress", Plugin: q.Plugin, Server: q.Server, Host: q.Host, Port: q.Port,
		Reason: d.egressReason(q.Plugin, q.Server, q.Host, q.Port), Refusal: q.Refusal, Always: true})
	return egress.Answer{Allow: o.Allowed(), Rule: outcomeRule(o, d.book.Wait, q.Refusal)}
}

// egressReason is the manifest's reason for a host, as its author wrote it (the
// server's own entry first).
func (d *Daemon) egressReason(plugin, server, host string, port int) string {
	d.mu.Lock()
	p := d.plugins[plugin]
	d.mu.Unlock()
	if p == nil {
		return ""
	}
	lists := [][]manifest.EgressEntry{p.Manifest.ServerEgress()[server], p.Manifest.Egress}
	for _, es := range lists {
		ps, err := manifest.Patterns(es)
		if err != nil {
			continue
		}
		for i, pt := range ps {
			if pt.Match(host, port) && i < len(es) && es[i].Reason != "" {
				return termtext.Line(es[i].Reason)
			}
		}
	}
	return ""
}

// answerer names the peer of a control request allowed to answer approvals: the
// control socket's owner alone, the node's own user (root on a root node).
func answerer(r *http.Request) (string, error) {
	c := peer.ConnOf(r.Context())
	if c == nil {
		return "", errors.New("no peer credentials")
	}
	uid, err := peer.UID(c)
	if err != nil {
		return "", err
	}
	if uid != os.Geteuid() {
		return "", fmt.Errorf("uid %d is not the control socket's owner (uid %d)", uid, os.Geteuid())
	}
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s (uid %d)", name, uid), nil
}

// operatorHandlers serves the approvals and the audit stream's latest lines on
// the control socket:
//
//	GET  /v1/approvals          the approvals waiting
//	POST /v1/approvals/{id}     answer one: {"answer": "once"|"always"|"deny", "via": "tui"|"cli"}
//	GET  /v1/audit?n=N          the audit stream's last N lines
func (d *Daemon) operatorHandlers(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		list := []api.Approval{}
		if d.book != nil {
			list = d.book.List()
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("POST /v1/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		who, err := answerer(r)
		if err != nil {
			d.log.Warn("approval answer refused", "err", err)
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "only the control socket's owner answers approvals: " + err.Error()})
			return
		}
		var body struct {
			Answer string `json:"answer"`
			Via    string `json:"via"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
			return
		}
		if d.book == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "approvals are off (run the node with --approval-wait)"})
			return
		}
		if via := strings.Join(strings.Fields(termtext.Line(body.Via)), ""); via != "" && len(via) <= 16 {
			who += " via " + via
		}
		if err := d.book.Answer(r.PathValue("id"), body.Answer, who); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, approval.ErrUnknown) {
				code = http.StatusNotFound
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "answered", "by": who})
	})
	mux.HandleFunc("GET /v1/audit", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if n <= 0 || n > 10000 {
			n = 200
		}
		lines := []api.AuditRecord{}
		if d.cfg.Audit != nil {
			got, err := audit.Last(d.cfg.Audit.Path(), n)
			if err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
				return
			}
			lines = append(lines, got...)
		}
		writeJSON(w, http.StatusOK, lines)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
