// Package gateway is the node's MCP face: an MCP client of every running server and
// one MCP server for callers. Tools are namespaced <plugin>__<tool>; every call asks
// the policy again first, and a refused or stopped server's call answers with the
// reason as a tool error. Hooks run around the calls it routes; which plugins'
// hooks see a call is the hook runner's decision, made from the call's owner.
// Resources and prompts are namespaced by plugin like tools, and a server's
// progress reaches only the call it belongs to.
package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"

	"oz0.ai/node/node/api"
)

// Sep joins a plugin name and a tool name.
const Sep = "__"

// ProtocolVersion is pinned on connections to plugin servers: older servers break
// on the newest default.
const ProtocolVersion = "2025-06-18"

// validToolName: the names MCP clients take for tools and prompts, 1 to 128 of
// A-Z a-z 0-9 _ . - (checked by hand: a package-level pattern compiled at every
// start of the binary, whatever the command).
func validToolName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Verdict is the policy's answer for one call: why it is refused, or for an
// allowed call anything worth keeping of why (an operator approved it).
type Verdict struct {
	OK     bool
	Reason string
}

// Call is what a check decides about: a call of a plugin's server and, for a
// tools/call, its tool as the server described it.
type Call struct {
	Plugin, Server string
	// Tool is the tool's namespaced name (<plugin>__<tool>); "" for a prompt or
	// a resource.
	Tool        string
	Annotations *mcp.ToolAnnotations
}

// Options configure a gateway.
type Options struct {
	Logger *slog.Logger
	// Check re-evaluates the policy before every call of a plugin's server (and
	// the tenant's tool rules for a tool), on every path a call takes. It may
	// wait (an operator's approval) until ctx ends.
	Check func(ctx context.Context, c Call) Verdict
	// Hidden, if set, says which rule hides a tool from tools/list ("" when it
	// is listed); asked as a server's tools are attached and at Relist.
	Hidden func(plugin, server string, t *mcp.Tool) string
	// Observe, if set, sees every tools/call routed to a plugin's server once it
	// is answered (the audit stream, traces).
	Observe func(*CallRecord)
	// Hooks runs the hooks of an event; nil runs none.
	Hooks HookRunner
	// OnFinding receives collisions and other gateway findings.
	OnFinding func(api.Finding)
	Version   string
	// OnCall, if set, sees each call routed to a plugin's server: its outcome (ok,
	// error, refused, blocked) and how long it took (metrics).
	OnCall func(plugin, outcome string, took time.Duration)
	// NotRunning says why a server that is not serving its tools is not (its
	// state); "" when it does not know. Asked for calls of remembered tools.
	NotRunning func(plugin, server string) string
	// MaxTools is how many tools one server may offer (0: DefaultMaxTools); the
	// rest are not served and a finding says so.
	MaxTools int
	// CallTimeout bounds how long a call waits for its server's answer (0: no
	// deadline of the node's own); a call past it ends with an error naming the
	// server and OnCallTimeout is told.
	CallTimeout   time.Duration
	OnCallTimeout func(plugin, server string)
}

// DefaultMaxTools bounds one server's tools: each costs memory in the node and
// room in every agent's context.
const DefaultMaxTools = 2000

type route struct {
	plugin, server, tool string
	session              *mcp.ClientSession
	raw                  RawBackend // nil: calls take the SDK's path
	// order takes the server's progress as it is read, so that a call's
	// progress goes before its answer (nil: through the SDK, unordered).
	order ProgressOrder
	// def is the tool as offered (namespaced), and hidden the rule that keeps
	// it out of tools/list ("" when listed); tools only.
	def    *mcp.Tool
	hidden string
}

type backendKey struct{ plugin, server string }

// Gateway aggregates servers.
type Gateway struct {
	opts     Options
	inFlight inFlight // the calls in flight, on both paths
	server   *mcp.Server
	mu       sync.RWMutex
	tools    map[string]*route               // namespaced tool → route
	owned    map[backendKey][]string         // backend → its namespaced tools
	prompts  map[string]*route               // namespaced prompt → route
	oprompt  map[backendKey][]string         //
	res      map[string]*route               // namespaced resource URI → route
	ores     map[backendKey][]string         //
	refused  map[backendKey]string           // refused or stopped servers → reason
	sess     map[*mcp.ServerSession]struct{} // caller sessions
	// agentHooks are the caller sessions whose door said their client forwards
	// its hooks (MarkAgentHooks).
	agentHooks map[*mcp.ServerSession]struct{}
	byID       map[string]*mcp.ServerSession // caller sessions with an id (HTTP), by it
	progMu     sync.Mutex
	prog       map[progressKey]progressRoute // per call: the token a server was given → its caller
	cmds       commandPrompts                // plugins' slash commands as prompts
	last       lastTools                     // each server's last known tools
}

// progressKey is the token the gateway gave one server for one call. A server's
// progress is looked up under its own backend, so it can never reach a call of
// another server even if it learns that call's token.
type progressKey struct {
	backend backendKey
	token   string
}

// progressRoute is where a call's progress goes: the caller's session, its
// request (so the notification travels with it) and the caller's own token.
type progressRoute struct {
	ctx    context.Context
	caller *mcp.ServerSession
	token  any
	// to takes the progress instead of the caller's session (FastCall.ProgressTo).
	to func(*mcp.ProgressNotificationParams)
	// order forwards the call's progress in the order read, before its answer,
	// when the server's connection hands it over as it reads it
	// (ProgressOrder); nil when it cannot.
	order *progressOrder
}

// ProgressOrder is implemented by a server connection that hands the gateway,
// as it reads them, a server's progress notifications under a token instead of
// passing them to the SDK: seen runs before any message read after the
// notification is passed on. The SDK hands a server's notifications on apart
// from its answers, so through it a call's progress could reach its caller
// after the call's answer, which ends it.
type ProgressOrder interface {
	WatchProgress(token string, seen func(params json.RawMessage)) (stop func())
}

// progressOrder forwards one call's progress, in the order the server sent it,
// on a goroutine of the call's own (a caller slow to read holds up only its own
// call's progress), and holds the call's answer until what was read before it
// has gone.
type progressOrder struct {
	send    func(*mcp.ProgressNotificationParams)
	mu      sync.Mutex
	queue   []*mcp.ProgressNotificationParams
	running bool
	closed  bool          // the call has answered
	idle    chan struct{} // signalled when the queue has drained
}

// maxQueuedProgress bounds the notifications waiting for one slow caller; the
// server's rate bounds how fast they come.
const maxQueuedProgress = 256

func (p *progressOrder) seen(params json.RawMessage) {
	var n mcp.ProgressNotificationParams
	if _, err := sjson.Parse(params, &n, sjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return // the SDK would refuse it too
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.queue) >= maxQueuedProgress {
		return
	}
	p.queue = append(p.queue, &n)
	if !p.running {
		p.running = true
		go p.run()
	}
}

func (p *progressOrder) run() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.running = false
			p.mu.Unlock()
			select {
			case p.idle <- struct{}{}:
			default:
			}
			return
		}
		n := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		p.send(n)
	}
}

// settle waits until the progress read so far has been forwarded, or for
// limit (a caller that reads nothing does not hold its answer for longer). Then
// the call's progress ends: what is still queued, and what comes later, is
// dropped.
func (p *progressOrder) settle(limit time.Duration) {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		if !p.running && len(p.queue) == 0 {
			p.closed = true
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(limit)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-p.idle:
		case <-deadline:
			p.mu.Lock()
			p.queue, p.closed = nil, true
			p.mu.Unlock()
			return
		}
	}
}

// New builds a gateway with an MCP server that starts with no tools.
func New(opts Options) *Gateway {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	g := &Gateway{
		opts:    opts,
		tools:   map[string]*route{},
		owned:   map[backendKey][]string{},
		prompts: map[string]*route{},
		oprompt: map[backendKey][]string{},
		res:     map[string]*route{},
		ores:    map[backendKey][]string{},
		refused: map[backendKey]string{},
		sess:    map[*mcp.ServerSession]struct{}{},
		prog:    map[progressKey]progressRoute{},
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "oz0-node", Version: opts.Version}, &mcp.ServerOptions{
		InitializedHandler: g.initialized,
		HasTools:           true,
		HasPrompts:         true,
		HasResources:       true,
	})
	g.server.AddReceivingMiddleware(g.unknownToolMiddleware)
	return g
}

// Server is the MCP server callers talk to.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Client returns an MCP client for one plugin server, forwarding its progress to
// the call it belongs to.
func (g *Gateway) Client(plugin, server string) *mcp.Client {
	key := backendKey{plugin, server}
	return mcp.NewClient(&mcp.Implementation{Name: "oz0-node", Version: g.opts.Version}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			g.forwardProgress(key, req.Params)
		},
	})
}

// forwardProgress passes a server's progress notification to the caller of the
// call whose token it carries, under the caller's own token. A token this server
// was not given for a call (another call's, a guessed one, one whose call ended
// more than progressLinger ago) is dropped.
func (g *Gateway) forwardProgress(from backendKey, p *mcp.ProgressNotificationParams) {
	tok, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	g.progMu.Lock()
	rt, ok := g.prog[progressKey{from, tok}]
	g.progMu.Unlock()
	if !ok {
		g.opts.Logger.Debug("progress for no call of this server dropped", "plugin", from.plugin, "server", from.server)
		return
	}
	// The call may have answered already: the SDK hands a server's notifications
	// on concurrently with its results, so progress sent before the result can
	// arrive here after it; the caller's session still takes it.
	sendProgress(rt, p)
}

// sendProgress sends a server's progress to the call's caller under the
// caller's own token.
func sendProgress(rt progressRoute, p *mcp.ProgressNotificationParams) {
	out := *p
	out.ProgressToken = rt.token
	if rt.to != nil {
		rt.to(&out)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rt.ctx), progressLinger)
	defer cancel()
	rt.caller.NotifyProgress(ctx, &out)
}

// progressLinger bounds the wait of one progress notification for its caller
// and, where the server's connection cannot order progress before answers,
// how long a call's progress route outlives its answer (for notifications the
// server sent before the answer that are handed on after it).
const progressLinger = 2 * time.Second

// progressFor gives one call to a server a fresh token of its own and routes that
// server's progress under it to the caller; done ends the route.
func (g *Gateway) progressFor(ctx context.Context, rt *route, caller *mcp.ServerSession, callerToken any, to func(*mcp.ProgressNotificationParams)) (token string, done func()) {
	var b [16]byte
	rand.Read(b[:])
	token = "oz0-" + hex.EncodeToString(b[:])
	k := progressKey{backendKey{rt.plugin, rt.server}, token}
	pr := progressRoute{ctx: ctx, caller: caller, token: callerToken, to: to}
	var stop func()
	if po := rt.order; po != nil {
		pr.order = &progressOrder{idle: make(chan struct{}, 1)}
		route := pr
		pr.order.send = func(n *mcp.ProgressNotificationParams) { sendProgress(route, n) }
		stop = po.WatchProgress(token, pr.order.seen)
	}
	g.progMu.Lock()
	g.prog[k] = pr
	g.progMu.Unlock()
	end := func() {
		g.progMu.Lock()
		delete(g.prog, k)
		g.progMu.Unlock()
	}
	return token, func() {
		if pr.order == nil {
			time.AfterFunc(progressLinger, end)
			return
		}
		// The progress read before the answer goes first; none goes after it.
		pr.order.settle(progressLinger)
		stop()
		end()
	}
}

// ResourceScheme prefixes every resource URI the gateway offers: the plugin's name
// is its host and the server's own URI its path, so two plugins' resources never
// share a URI and a read goes back to the plugin whose resource it is.
const ResourceScheme = "oz0-plugin"

// ResourceURI is the URI under which the gateway offers a plugin's resource.
func ResourceURI(plugin, uri string) string { return ResourceScheme + "://" + plugin + "/" + uri }

// SessionOptions pins the protocol version towards plugin servers.
func SessionOptions() *mcp.ClientSessionOptions {
	return &mcp.ClientSessionOptions{ProtocolVersion: ProtocolVersion}
}

// Namespaced returns <plugin>__<tool>.
func Namespaced(plugin, tool string) string { return plugin + Sep + tool }

// Attach lists a connected server's tools, prompts and resources and adds them
// under its plugin's namespace. Names that collide with another server's are
// refused with a finding; invalid names are skipped with a log line.
func (g *Gateway) Attach(ctx context.Context, plugin, server string, cs *mcp.ClientSession) error {
	return g.AttachRaw(ctx, plugin, server, cs, nil, nil)
}

// AttachRaw is Attach for a server whose connection can also carry calls as
// bytes (raw; nil for none): its tools' calls then take the fast path; and
// whose connection hands over its progress as it reads it (order; nil for
// none): its calls' progress then goes before their answers.
func (g *Gateway) AttachRaw(ctx context.Context, plugin, server string, cs *mcp.ClientSession, raw RawBackend, order ProgressOrder) error {
	key := backendKey{plugin, server}
	var tools []*mcp.Tool
	maxTools := cmp.Or(g.opts.MaxTools, DefaultMaxTools)
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools of %s/%s: %w", plugin, server, err)
		}
		if len(tools) == maxTools {
			g.finding(api.Finding{Code: api.CodeToolCountLimit, Severity: api.SevWarning, Subject: plugin + "/" + server,
				Message: fmt.Sprintf("server %s/%s offers more than %d tools; only the first %d are served", plugin, server, maxTools, maxTools),
				Fix:     "split the server's tools across servers, or offer fewer"})
			break
		}
		tools = append(tools, t)
	}
	var prompts []*mcp.Prompt
	var resources []*mcp.Resource
	if caps := cs.InitializeResult().Capabilities; caps != nil {
		if caps.Prompts != nil {
			for p, err := range cs.Prompts(ctx, nil) {
				if err != nil {
					break
				}
				prompts = append(prompts, p)
			}
		}
		if caps.Resources != nil {
			for r, err := range cs.Resources(ctx, nil) {
				if err != nil {
					break
				}
				resources = append(resources, r)
			}
		}
	}

	g.mu.Lock()
	g.detachLocked(key)
	delete(g.refused, key)
	var added []*mcp.Tool
	var offered []*mcp.Tool
	for _, t := range tools {
		name := Namespaced(plugin, t.Name)
		if !validToolName(name) {
			g.opts.Logger.Warn("tool name not valid for MCP; skipped", "plugin", plugin, "server", server, "tool", t.Name)
			continue
		}
		if other, ok := g.tools[name]; ok {
			g.finding(api.Finding{Code: api.CodeToolCollision, Severity: api.SevWarning, Subject: name,
				Message: fmt.Sprintf("tool %s of server %s/%s collides with the same tool of server %s/%s; the later one is refused", name, plugin, server, other.plugin, other.server),
				Fix:     "rename the tool in one of the servers"})
			continue
		}
		nt := *t
		nt.Name = name
		if nt.InputSchema == nil {
			nt.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		g.tools[name] = &route{plugin: plugin, server: server, tool: t.Name, session: cs, raw: raw, order: order, def: &nt}
		g.owned[key] = append(g.owned[key], name)
		added = append(added, &nt)
	}
	var addedPrompts []*mcp.Prompt
	for _, p := range prompts {
		name := Namespaced(plugin, p.Name)
		if !validToolName(name) {
			g.opts.Logger.Warn("prompt name not valid for MCP; skipped", "plugin", plugin, "server", server, "prompt", p.Name)
			continue
		}
		if other, ok := g.prompts[name]; ok {
			g.finding(api.Finding{Code: api.CodePromptCollision, Severity: api.SevWarning, Subject: name,
				Message: fmt.Sprintf("prompt %s of server %s/%s collides with the same prompt of server %s/%s; the later one is refused", name, plugin, server, other.plugin, other.server),
				Fix:     "rename the prompt in one of the servers"})
			continue
		}
		g.prompts[name] = &route{plugin: plugin, server: server, tool: p.Name, session: cs}
		g.oprompt[key] = append(g.oprompt[key], name)
		np := *p
		np.Name = name
		addedPrompts = append(addedPrompts, &np)
	}
	var addedRes []*mcp.Resource
	for _, r := range resources {
		uri := ResourceURI(plugin, r.URI)
		if _, err := url.Parse(uri); err != nil {
			g.opts.Logger.Warn("resource URI not valid; skipped", "plugin", plugin, "server", server, "uri", r.URI, "err", err)
			continue
		}
		if other, ok := g.res[uri]; ok {
			g.finding(api.Finding{Code: api.CodeResourceCollision, Severity: api.SevWarning, Subject: uri,
				Message: fmt.Sprintf("resource %s of server %s/%s collides with the same resource of server %s/%s; the later one is refused", r.URI, plugin, server, other.plugin, other.server),
				Fix:     "give the resource another URI in one of the servers"})
			continue
		}
		g.res[uri] = &route{plugin: plugin, server: server, tool: r.URI, session: cs}
		g.ores[key] = append(g.ores[key], uri)
		nr := *r
		nr.URI = uri
		addedRes = append(addedRes, &nr)
	}
	g.mu.Unlock()

	// A tool a tenant's rule hides is routed (its calls are refused with the
	// rule) but not offered.
	if g.opts.Hidden != nil {
		for _, t := range added {
			h := g.opts.Hidden(plugin, server, t)
			g.mu.Lock()
			if rt := g.tools[t.Name]; rt != nil && rt.def == t {
				rt.hidden = h
			}
			g.mu.Unlock()
			if h == "" {
				offered = append(offered, t)
			}
		}
	} else {
		offered = added
	}
	// Adding tools notifies callers (tools/list_changed) through the SDK.
	for _, t := range offered {
		g.server.AddTool(t, g.toolHandler(t.Name))
	}
	for _, p := range addedPrompts {
		g.server.AddPrompt(p, g.promptHandler(p.Name))
	}
	for _, r := range addedRes {
		g.server.AddResource(r, g.resourceHandler(r.URI))
	}
	return nil
}

// Detach removes a server's tools (it stopped or crashed); reason is what its
// tools' calls answer until it is back.
func (g *Gateway) Detach(plugin, server, reason string) {
	key := backendKey{plugin, server}
	g.mu.Lock()
	tools, prompts, res := g.detachLocked(key)
	if reason != "" {
		g.refused[key] = reason
	}
	g.mu.Unlock()
	g.server.RemoveTools(tools...)
	g.server.RemovePrompts(prompts...)
	g.server.RemoveResources(res...)
}

func (g *Gateway) detachLocked(key backendKey) (tools, prompts, res []string) {
	tools = g.owned[key]
	for _, n := range tools {
		delete(g.tools, n)
	}
	delete(g.owned, key)
	prompts = g.oprompt[key]
	for _, n := range prompts {
		delete(g.prompts, n)
	}
	delete(g.oprompt, key)
	res = g.ores[key]
	for _, n := range res {
		delete(g.res, n)
	}
	delete(g.ores, key)
	return tools, prompts, res
}

// Refuse records that a server is not running and why; calls of any tool in its
// plugin's namespace that no running server offers answer with that reason.
func (g *Gateway) Refuse(plugin, server, reason string) {
	g.Detach(plugin, server, reason)
}

// Forget drops everything about a plugin's server (it was removed).
func (g *Gateway) Forget(plugin, server string) {
	g.Detach(plugin, server, "")
	g.mu.Lock()
	delete(g.refused, backendKey{plugin, server})
	g.mu.Unlock()
}

// Tools lists the namespaced tools of a server, sorted.
func (g *Gateway) Tools(plugin, server string) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := append([]string(nil), g.owned[backendKey{plugin, server}]...)
	sort.Strings(out)
	return out
}

// Relist asks Hidden again for every attached tool (the tenant's rules changed):
// a tool a rule now hides leaves tools/list and one no rule hides any more joins
// it, and callers are told (tools/list_changed).
func (g *Gateway) Relist() {
	if g.opts.Hidden == nil {
		return
	}
	g.mu.RLock()
	rts := make([]*route, 0, len(g.tools))
	for _, rt := range g.tools {
		rts = append(rts, rt)
	}
	g.mu.RUnlock()
	var hide []string
	var show []*mcp.Tool
	for _, rt := range rts {
		h := g.opts.Hidden(rt.plugin, rt.server, rt.def)
		g.mu.Lock()
		was, still := rt.hidden, g.tools[rt.def.Name] == rt
		if still {
			rt.hidden = h
		}
		g.mu.Unlock()
		switch {
		case !still:
		case was == "" && h != "":
			hide = append(hide, rt.def.Name)
		case was != "" && h == "":
			show = append(show, rt.def)
		}
	}
	if len(hide) > 0 {
		g.server.RemoveTools(hide...)
	}
	for _, t := range show {
		g.server.AddTool(t, g.toolHandler(t.Name))
	}
}

// Hidden lists a server's tools that a rule keeps out of tools/list, each with
// the rule.
func (g *Gateway) Hidden(plugin, server string) map[string]string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out map[string]string
	for _, name := range g.owned[backendKey{plugin, server}] {
		if rt := g.tools[name]; rt != nil && rt.hidden != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = rt.hidden
		}
	}
	return out
}

func (g *Gateway) finding(f api.Finding) {
	g.opts.Logger.Warn(f.Message, "code", f.Code)
	if g.opts.OnFinding != nil {
		go g.opts.OnFinding(f)
	}
}

// refusalFor returns what answers a call of a tool no running server offers:
// for each of the plugin's refused or stopped servers, the reason that holds now
// (Options.NotRunning decides again) — never a refusal the operator has since
// lifted, such as a host added to the tenant list or a value set — or, without
// NotRunning, the reason recorded when it stopped.
func (g *Gateway) refusalFor(tool string) (string, bool) {
	plugin, _, ok := strings.Cut(tool, Sep)
	if !ok {
		return "", false
	}
	g.mu.RLock()
	var keys []backendKey
	recorded := map[backendKey]string{}
	for k, r := range g.refused {
		if k.plugin == plugin {
			keys = append(keys, k)
			recorded[k] = r
		}
	}
	g.mu.RUnlock()
	if len(keys) == 0 {
		return "", false
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].server < keys[j].server })
	var reasons []string
	for _, k := range keys {
		if g.opts.NotRunning == nil {
			reasons = append(reasons, "refused: "+recorded[k])
			continue
		}
		why := strings.TrimSpace(g.opts.NotRunning(k.plugin, k.server))
		switch {
		case why == "":
			continue // it runs again (its tools are about to be listed)
		case strings.HasPrefix(why, "refused: "):
			reasons = append(reasons, why)
		default:
			reasons = append(reasons, "not running: server "+k.plugin+"/"+k.server+" is "+why)
		}
	}
	if len(reasons) == 0 {
		return "", false
	}
	return strings.Join(reasons, "; "), true
}

// callArgs is what a call's arguments are forwarded as: a call without any gets
// an empty object, since "arguments": null is rejected by servers.
func callArgs(args json.RawMessage) json.RawMessage {
	if len(args) == 0 || string(args) == "null" {
		return json.RawMessage("{}")
	}
	return args
}

// failed is the tool error that answers a call the server did not answer.
func (rt *route) failed(err error) *mcp.CallToolResult {
	return errorResult(fmt.Sprintf("call %s on %s/%s: %v", rt.tool, rt.plugin, rt.server, err))
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// unknownToolMiddleware answers calls of tools that no running server offers but
// whose plugin has a refused or stopped server: with the refusal, not "unknown".
// It also hands a caller's cancellations to the fast path, whose calls the SDK
// does not know.
func (g *Gateway) unknownToolMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/cancelled" {
			ss, _ := req.GetSession().(*mcp.ServerSession)
			if p, ok := req.GetParams().(*mcp.CancelledParams); ok && ss != nil {
				g.cancelFast(ss, p)
			}
		}
		if method == "tools/call" {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				g.mu.RLock()
				rt, known := g.tools[p.Name]
				hidden := known && rt.hidden != ""
				g.mu.RUnlock()
				// A hidden tool is not the SDK's: its call is the gateway's to
				// refuse (or to let through once an operator approves it).
				if ctr, ok := req.(*mcp.CallToolRequest); ok && hidden {
					return g.toolHandler(p.Name)(ctx, ctr)
				}
				if !known {
					if why, ok := g.notRunning(p.Name); ok {
						return errorResult(why), nil
					}
					if reason, ok := g.refusalFor(p.Name); ok {
						return errorResult(reason), nil
					}
				}
			}
		}
		return next(ctx, method, req)
	}
}

func (g *Gateway) toolHandler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		g.mu.RLock()
		rt := g.tools[name]
		g.mu.RUnlock()
		if rt == nil {
			if reason, ok := g.refusalFor(name); ok {
				return errorResult(reason), nil
			}
			return errorResult("tool " + name + " is not available: its server is not running"), nil
		}
		sid := sessionID(req.Session)
		// Its session's end ends the call; its cancellation is the SDK's.
		var c call
		ctx = g.startCall(ctx, &c, sid, nil, jsonrpc.ID{})
		defer g.endCall(&c)
		start, outcome := time.Now(), "refused"
		if g.opts.OnCall != nil {
			defer func() { g.opts.OnCall(rt.plugin, outcome, time.Since(start)) }()
		}
		var rec *CallRecord
		if g.opts.Observe != nil {
			rec = newRecord(req.Session, "sdk", rt, name, req.Params.Arguments, start)
			rec.fromHTTP(req.Extra)
			rec.traceFrom(req.Params.Meta)
			defer g.observe(rec)
		}
		var why string // an allowed call's reason: an operator's approval
		if g.opts.Check != nil {
			v := g.opts.Check(ctx, Call{Plugin: rt.plugin, Server: rt.server, Tool: name, Annotations: rt.def.Annotations})
			if !v.OK {
				rec.decided(DecisionDeny, v.Reason)
				return errorResult("refused: " + v.Reason), nil
			}
			why = v.Reason
		}
		args := callArgs(req.Params.Arguments)
		call := ToolCall{Session: sid, Plugin: rt.plugin, Tool: name, Args: args}
		outcome = "blocked"
		hooks := g.opts.Hooks != nil && !g.forwardsHooks(req.Session, callCaps(req))
		if hooks {
			if block := g.opts.Hooks.PreToolUse(ctx, call); block != "" {
				rec.decided(DecisionBlock, "PreToolUse hook: "+block)
				return errorResult("blocked by a PreToolUse hook: " + block), nil
			}
		}
		rec.decided(DecisionAllow, why)
		params := &mcp.CallToolParams{Name: rt.tool, Arguments: args}
		if tok := req.Params.GetProgressToken(); tok != nil {
			// The server gets a token of its own for this call, never the
			// caller's: another server cannot aim progress at this call.
			own, done := g.progressFor(ctx, rt, req.Session, tok, nil)
			defer done()
			params.SetProgressToken(own)
		}
		cctx, dl := g.deadline(ctx, rt)
		res, err := rt.session.CallTool(cctx, params)
		err = dl.finish(err)
		if outcome = "ok"; err != nil || res != nil && res.IsError {
			outcome = "error"
		}
		rec.answered(ctx, res, err)
		if err != nil {
			return rt.failed(err), nil
		}
		if hooks {
			if block := g.opts.Hooks.PostToolUse(ctx, call, res); block != "" {
				outcome = "blocked"
				rec.decided(DecisionBlock, "PostToolUse hook: "+block)
				return errorResult("blocked by a PostToolUse hook: " + block), nil
			}
		}
		return res, nil
	}
}

func (g *Gateway) promptHandler(name string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		g.mu.RLock()
		rt := g.prompts[name]
		g.mu.RUnlock()
		if rt == nil {
			return nil, fmt.Errorf("prompt %s is not available: its server is not running", name)
		}
		if g.opts.Check != nil {
			if v := g.opts.Check(ctx, Call{Plugin: rt.plugin, Server: rt.server}); !v.OK {
				return nil, fmt.Errorf("refused: %s", v.Reason)
			}
		}
		return rt.session.GetPrompt(ctx, &mcp.GetPromptParams{Name: rt.tool, Arguments: req.Params.Arguments})
	}
}

func (g *Gateway) resourceHandler(uri string) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		g.mu.RLock()
		rt := g.res[uri]
		g.mu.RUnlock()
		if rt == nil {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if g.opts.Check != nil {
			if v := g.opts.Check(ctx, Call{Plugin: rt.plugin, Server: rt.server}); !v.OK {
				return nil, fmt.Errorf("refused: %s", v.Reason)
			}
		}
		res, err := rt.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: rt.tool})
		if err != nil {
			return nil, err
		}
		// The contents name URIs of the plugin's own: they are offered under its
		// namespace too.
		for _, c := range res.Contents {
			if c != nil && c.URI != "" {
				c.URI = ResourceURI(rt.plugin, c.URI)
			}
		}
		return res, nil
	}
}

func sessionID(ss *mcp.ServerSession) string {
	if ss == nil {
		return ""
	}
	if id := ss.ID(); id != "" {
		return id
	}
	return fmt.Sprintf("%p", ss)
}

// initialized runs SessionStart hooks for a new caller session, and SessionEnd
// hooks when it ends. A session with an id (Streamable HTTP) is also remembered
// by it for the fast path, until it ends.
func (g *Gateway) initialized(ctx context.Context, req *mcp.InitializedRequest) {
	ss := req.Session
	g.mu.Lock()
	_, seen := g.sess[ss]
	g.sess[ss] = struct{}{}
	id := ss.ID()
	if !seen && id != "" {
		if g.byID == nil {
			g.byID = map[string]*mcp.ServerSession{}
		}
		g.byID[id] = ss
	}
	g.mu.Unlock()
	if seen {
		return
	}
	hooks := g.opts.Hooks != nil && !g.forwardsHooks(ss, sessionCaps(ss))
	sid := sessionID(ss)
	go func() {
		if hooks {
			g.opts.Hooks.Session(context.Background(), "SessionStart", sid)
		}
		ss.Wait()
		g.mu.Lock()
		delete(g.sess, ss)
		if g.byID[id] == ss {
			delete(g.byID, id)
		}
		g.mu.Unlock()
		if hooks {
			g.opts.Hooks.Session(context.Background(), "SessionEnd", sid)
		}
	}()
}

// Session returns the initialised caller session whose Streamable HTTP id is id.
func (g *Gateway) Session(id string) *mcp.ServerSession {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byID[id]
}
