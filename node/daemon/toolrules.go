package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/gateway"
	"oz0.ai/node/node/toolrule"
)

// toolRules is the tenant's per-tool rules as the node applies them now, read
// live from <data>/tenant/tools (docs/operators.md, "The tenant's tool rules").
type toolRules struct {
	cur atomic.Pointer[toolrule.Rules]
	mu  sync.Mutex // orders applies: the watcher's and an approval's
	raw []byte     // what cur was read from
}

// The tool rules file settles like the egress list (node/egress/tenant.go): a
// change applies once the same content has been read twice this far apart (a
// second when its last line is unterminated: an editor may be mid-write), so a
// file half-rewritten never applies; the rules before it stay until it settles.
const (
	toolRulesSettle       = 15 * time.Millisecond
	toolRulesUnterminated = time.Second
	toolRulesPoll         = time.Second
)

// hintsOf are a tool's annotations as the rules read them.
func hintsOf(a *mcp.ToolAnnotations) toolrule.Hints {
	if a == nil {
		return toolrule.Hints{}
	}
	h := toolrule.Hints{Destructive: a.DestructiveHint, OpenWorld: a.OpenWorldHint}
	if a.ReadOnlyHint {
		h.ReadOnly = &a.ReadOnlyHint
	}
	if a.IdempotentHint {
		h.Idempotent = &a.IdempotentHint
	}
	return h
}

// rules are the tool rules in force.
func (d *Daemon) rules() *toolrule.Rules { return d.toolRules.cur.Load() }

// hidden is the gateway's Hidden: the rule that refuses a tool hides it.
func (d *Daemon) hidden(plugin, server string, t *mcp.Tool) string {
	dec := d.rules().Decide(t.Name, hintsOf(t.Annotations))
	if dec.Allow {
		return ""
	}
	return dec.Rule
}

// checkTool decides a call of a tool by the tenant's rules; a refusal may wait
// for an operator (--approval-wait).
func (d *Daemon) checkTool(ctx context.Context, c gateway.Call) gateway.Verdict {
	rs := d.rules()
	dec := rs.Decide(c.Tool, hintsOf(c.Annotations))
	if dec.Allow {
		return gateway.Verdict{OK: true}
	}
	refusal := "the tenant's tool rules refuse " + c.Tool + ": " + dec.Rule
	if d.book == nil {
		return gateway.Verdict{Reason: refusal}
	}
	return d.askTool(ctx, c, refusal, dec.Unlisted)
}

// loadToolRules reads the file now (at start, before any call).
func (d *Daemon) loadToolRules() {
	rs, raw := datadir.ReadToolRules(d.cfg.Node.Dir.ToolRules())
	d.toolRules.cur.Store(rs)
	d.toolRules.raw = raw
	if rs.Err != nil {
		d.log.Error("tenant tool rules unusable; refusing every tool call", "path", rs.Path, "err", rs.Err)
	}
}

// applyToolRules makes rs the rules in force when they differ, and tells the
// gateway (tools/list and its list_changed) and status.
func (d *Daemon) applyToolRules(rs *toolrule.Rules, raw []byte) {
	d.toolRules.mu.Lock()
	old := d.toolRules.cur.Load()
	if bytes.Equal(raw, d.toolRules.raw) && old.Missing == rs.Missing && (old.Err == nil) == (rs.Err == nil) {
		d.toolRules.mu.Unlock()
		return
	}
	d.toolRules.cur.Store(rs)
	d.toolRules.raw = raw
	d.toolRules.mu.Unlock()
	if rs.Err != nil {
		d.log.Error("tenant tool rules unusable; refusing every tool call", "path", rs.Path, "err", rs.Err)
	} else {
		d.log.Info("tenant tool rules loaded", "path", rs.Path, "rules", len(rs.Rules), "missing", rs.Missing)
	}
	d.gw.Relist()
	d.changed()
}

// watchToolRules follows the file's folder with fsnotify (an editor replaces the
// file by renaming) and, behind it, a poll of the file's stat.
func (d *Daemon) watchToolRules(ctx context.Context) {
	path := d.cfg.Node.Dir.ToolRules()
	dir := filepath.Dir(path)
	w, err := fsnotify.NewWatcher()
	var events <-chan fsnotify.Event
	if err == nil {
		defer w.Close()
		if w.Add(dir) == nil {
			events = w.Events
		}
	}
	poll := time.NewTicker(toolRulesPoll)
	defer poll.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var seen []byte
	var since time.Time
	lastStat := statKey(path)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == filepath.Base(path) {
				timer.Reset(toolRulesSettle)
			}
		case <-poll.C:
			if events == nil && w != nil && w.Add(dir) == nil {
				events = w.Events
			}
			if sk := statKey(path); sk != lastStat {
				lastStat = sk
				timer.Reset(0)
			}
		case <-timer.C:
			rs, raw := datadir.ReadToolRules(path)
			key := append([]byte(fmt.Sprintf("%v|%v|", rs.Missing, rs.Err)), raw...)
			now := time.Now()
			if !bytes.Equal(key, seen) {
				seen, since = key, now
			}
			need := toolRulesSettle
			if len(raw) > 0 && raw[len(raw)-1] != '\n' {
				need = toolRulesUnterminated
			}
			if waited := now.Sub(since); waited < need {
				timer.Reset(need - waited)
				continue
			}
			d.applyToolRules(rs, raw)
		}
	}
}

// statKey tells a file's versions apart: size, time, mode and inode.
func statKey(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "err:" + err.Error()
	}
	_, ino, _ := statIdentity(fi)
	return fmt.Sprintf("%d/%d/%v/%d", fi.Size(), fi.ModTime().UnixNano(), fi.Mode(), ino)
}

// toolRulesStatus is the rules file as status shows it, and the finding a file
// that cannot be used raises.
func (d *Daemon) toolRulesStatus() (api.ToolRulesStatus, []api.Finding) {
	rs := d.rules()
	st := api.ToolRulesStatus{Path: rs.Path, Present: !rs.Missing, OK: rs.Err == nil, Rules: len(rs.Rules)}
	if rs.Err == nil {
		return st, nil
	}
	st.Error = rs.Err.Error()
	return st, []api.Finding{{Code: api.CodeToolRulesUnreadable, Severity: api.SevCritical, Subject: rs.Path,
		Message: "the tenant's tool rules cannot be used: " + rs.Err.Error() + "; every tool call is refused until they are fixed",
		Fix:     "fix that line of " + rs.Path + " (allow|deny <plugin>__<tool> with * globs, or annotation:HINT); the change applies within a second, no restart"}}
}
