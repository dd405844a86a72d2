package gateway

import (
	"slices"
	"sort"
	"strings"
	"sync"
)

// MaxRememberedTools bounds how many tool names of one server are remembered: a
// server cannot grow the node's memory or its file without end.
const MaxRememberedTools = 1024

// lastTools is each server's last known tool list (the server's own names), kept
// while it is not running and across restarts of the node, so a call of one of
// its tools answers why the server is not running instead of "unknown tool".
type lastTools struct {
	mu     sync.Mutex
	byKey  map[backendKey][]string
	byTool map[string]backendKey // namespaced tool → its server
}

// Remember sets a server's last known tools (its own names, not namespaced);
// nil forgets them. Invalid names are dropped. It reports whether the list
// changed.
func (g *Gateway) Remember(plugin, server string, tools []string) bool {
	key := backendKey{plugin, server}
	var keep []string
	for _, t := range tools {
		if len(keep) == MaxRememberedTools {
			break
		}
		if validToolName(Namespaced(plugin, t)) {
			keep = append(keep, t)
		}
	}
	sort.Strings(keep)
	keep = slices.Compact(keep)
	l := &g.last
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey, l.byTool = map[backendKey][]string{}, map[string]backendKey{}
	}
	old, had := l.byKey[key]
	if had == (keep != nil) && slices.Equal(old, keep) {
		return false
	}
	for _, t := range old {
		if l.byTool[Namespaced(plugin, t)] == key {
			delete(l.byTool, Namespaced(plugin, t))
		}
	}
	delete(l.byKey, key)
	if keep == nil {
		return true
	}
	l.byKey[key] = keep
	for _, t := range keep {
		l.byTool[Namespaced(plugin, t)] = key
	}
	return true
}

// Remembered returns the last known tools of every server of a plugin.
func (g *Gateway) Remembered(plugin string) map[string][]string {
	l := &g.last
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for k, tools := range l.byKey {
		if k.plugin == plugin {
			out[k.server] = slices.Clone(tools)
		}
	}
	return out
}

// ToolNames lists the tools a running server offers through the gateway, by
// the server's own names, sorted.
func (g *Gateway) ToolNames(plugin, server string) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []string
	for _, n := range g.owned[backendKey{plugin, server}] {
		if rt := g.tools[n]; rt != nil {
			out = append(out, rt.tool)
		}
	}
	sort.Strings(out)
	return out
}

// notRunning answers a call of a tool no running server offers but that a
// server offered when it last ran: which server, and why it is not running now.
func (g *Gateway) notRunning(tool string) (string, bool) {
	if g.opts.NotRunning == nil {
		return "", false
	}
	g.last.mu.Lock()
	key, ok := g.last.byTool[tool]
	g.last.mu.Unlock()
	if !ok {
		return "", false
	}
	why := strings.TrimSpace(g.opts.NotRunning(key.plugin, key.server))
	if why == "" {
		return "", false
	}
	return "not running: tool " + tool + " is served by " + key.plugin + "/" + key.server + ", which is " + why, true
}
