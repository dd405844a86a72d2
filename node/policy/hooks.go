package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/manifest"
)

// HookGrantFlag is the run flag by which the operator lets one plugin's hooks see
// another plugin's tool calls.
const HookGrantFlag = "--plugin-hooks-see"

// HookGrant is one --plugin-hooks-see WATCHER=OTHER value: the hooks of plugin
// Watcher receive the tool events (arguments and results) of plugin Other's calls,
// and so can block or delay them.
type HookGrant struct {
	Watcher string `json:"watcher"`
	Other   string `json:"other"`
}

func (g HookGrant) String() string { return g.Watcher + "=" + g.Other }

// ParseHookGrants parses --plugin-hooks-see values; each may hold several
// comma-separated WATCHER=OTHER entries. Both sides are plugin names: there is no
// wildcard, a grant names the plugin whose calls it opens. Duplicates are merged.
func ParseHookGrants(values []string) ([]HookGrant, error) {
	var out []HookGrant
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			w, o, ok := strings.Cut(strings.TrimSpace(item), "=")
			switch {
			case !ok:
				return nil, fmt.Errorf("%s %q: must be WATCHER=OTHER (the plugin whose hooks see, = the plugin whose calls they see)", HookGrantFlag, v)
			case !manifest.ValidName(w):
				return nil, fmt.Errorf("%s %q: %q is not a plugin name (kebab-case)", HookGrantFlag, v, w)
			case !manifest.ValidName(o):
				return nil, fmt.Errorf("%s %q: %q is not a plugin name (kebab-case; there is no wildcard)", HookGrantFlag, v, o)
			case w == o:
				return nil, fmt.Errorf("%s %q: a plugin's hooks always see its own calls", HookGrantFlag, v)
			}
			g := HookGrant{Watcher: w, Other: o}
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out, nil
}

// HookSees decides whether the hooks of plugin watcher receive the event of a call
// of a tool that belongs to plugin owner ("" for a tool of the agent's own, which
// no plugin wrote). A plugin's hooks see its own calls and the agent's; another
// plugin's only where the operator granted it by name.
func HookSees(grants []HookGrant, watcher, owner string) bool {
	if owner == "" || owner == watcher {
		return true
	}
	return slices.Contains(grants, HookGrant{Watcher: watcher, Other: owner})
}

// HooksSeeOf lists, sorted, the plugins whose calls the hooks of watcher are granted.
func HooksSeeOf(grants []HookGrant, watcher string) []string {
	var out []string
	for _, g := range grants {
		if g.Watcher == watcher && !slices.Contains(out, g.Other) {
			out = append(out, g.Other)
		}
	}
	slices.Sort(out)
	return out
}

// HookGrantFindings says, per grant, what it opens: an info finding when both
// plugins are installed (the watcher's hooks see the other's arguments and results
// and can block them), a warning when either is not (it will cover whatever is
// installed under that name next).
func HookGrantFindings(grants []HookGrant, installed func(name string) bool) []api.Finding {
	var out []api.Finding
	for _, g := range grants {
		flag := HookGrantFlag + " " + g.String()
		var missing []string
		for _, n := range []string{g.Watcher, g.Other} {
			if !installed(n) {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			out = append(out, api.Finding{Code: api.CodeHookGrantUnmatched, Severity: api.SevWarning, Subject: g.String(),
				Message: fmt.Sprintf("%s names %s, not installed; it will cover whatever is installed under that name next", flag, strings.Join(missing, " and ")),
				Fix:     "remove the flag if it is stale"})
			continue
		}
		out = append(out, api.Finding{Code: api.CodeHookGrant, Severity: api.SevInfo, Subject: g.String(),
			Message: fmt.Sprintf("the hooks of %s see the arguments and results of %s's tool calls and can block them (%s)", g.Watcher, g.Other, flag),
			Fix:     "remove " + flag + " to keep " + g.Other + "'s calls from " + g.Watcher})
	}
	return out
}

// HookTimeoutCap is the longest the node lets any hook run, whatever its manifest
// says (Claude Code reads `timeout` in seconds; manifests may ask for an hour). A
// hook past it is killed and, like a hook that fails, does not block: a stalled hook
// cannot hold a call longer than this. The manifest clamps to the same value.
const HookTimeoutCap = manifest.MaxHookTimeout

// HookTimeout is the time hook h gets: what its manifest asks, at most the cap.
// capped reports whether the manifest asked for more, as written (the loader has
// already clamped h.Timeout, so the declared seconds are what tell).
func HookTimeout(h manifest.Hook) (d time.Duration, capped bool) {
	d = h.Timeout
	capped = d > HookTimeoutCap || h.DeclaredTimeout > HookTimeoutCap.Seconds()
	if d <= 0 || d > HookTimeoutCap {
		d = HookTimeoutCap
	}
	return d, capped
}

// HookProjectFlag is the flag by which the operator lets one plugin's hooks read
// the agent session's project (its cwd), read-only. Write access is not offered.
const HookProjectFlag = "--plugin-hooks-project"

// ParseHookProject parses --plugin-hooks-project values: plugin names, each value
// possibly comma-separated. Duplicates are merged.
func ParseHookProject(values []string) ([]string, error) {
	return parsePluginNames(HookProjectFlag, values)
}

// parsePluginNames parses the values of a flag that names plugins: each value
// possibly comma-separated, no wildcard, duplicates merged, sorted.
func parsePluginNames(flag string, values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if !manifest.ValidName(name) {
				return nil, fmt.Errorf("%s %q: %q is not a plugin name (kebab-case; there is no wildcard)", flag, v, name)
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// HookApproveFlag is the flag by which the operator gives one plugin's hooks the
// whole hook protocol for every tool (docs/promises.md §15).
const HookApproveFlag = "--plugin-hooks-approve"

// HookEgressFlag is the flag by which the operator lets one plugin's hooks keep
// the plugin's egress when they receive the agent's data (docs/promises.md §16).
const HookEgressFlag = "--plugin-hooks-egress"

// ParseHookApprove parses --plugin-hooks-approve values (plugin names).
func ParseHookApprove(values []string) ([]string, error) {
	return parsePluginNames(HookApproveFlag, values)
}

// ParseHookEgress parses --plugin-hooks-egress values (plugin names).
func ParseHookEgress(values []string) ([]string, error) {
	return parsePluginNames(HookEgressFlag, values)
}

// HookAuthority decides whether the hooks of plugin watcher speak the whole hook
// protocol for one event: only for a call of a tool watcher itself serves (owner,
// known exactly, is watcher), or where the operator approved watcher by name.
// Otherwise — the agent's own tools, another plugin's, events without a tool —
// its answer may only narrow: deny, ask, block, stop, add context. A plugin's
// hook runs in its sandbox, but its answer acts in the agent, with the user's
// authority on the host (docs/promises.md §15).
func HookAuthority(approved []string, watcher, owner string) bool {
	return owner != "" && owner == watcher || slices.Contains(approved, watcher)
}

// HookRun is the decision for one run of hook t of plugin watcher, for an event
// about a tool of owner ("" for the agent's own tools and events without a tool):
// the hook's decision, except that a sandboxed hook that receives the agent's
// data — anything but a call of its own plugin's tool — gets no network at all,
// unless the operator granted watcher's hooks egress (docs/promises.md §16).
func HookRun(t Target, egress []string, watcher, owner string) Target {
	if t.Action != Sandboxed || t.Network == NetIsolated || owner != "" && owner == watcher || slices.Contains(egress, watcher) {
		return t
	}
	t.Network = NetIsolated
	t.Reasons = append(slices.Clip(t.Reasons), fmt.Sprintf("the event carries the agent's data, not a call of %s's own tool: the hook runs with no network (the operator grants it with %s %s)", watcher, HookEgressFlag, watcher))
	return t
}

// HookTrustFindings says what --plugin-hooks-approve and --plugin-hooks-egress
// open, per plugin named: a finding for each grant in force, a warning for a
// name that is not installed.
func HookTrustFindings(approved, egress []string, installed func(name string) bool) []api.Finding {
	var out []api.Finding
	for _, g := range []struct {
		flag  string
		names []string
		code  string
		sev   api.Severity
		msg   string
	}{
		{HookApproveFlag, approved, api.CodeHookApproved, api.SevWarning, "the hooks of %s speak the whole hook protocol for every tool: they can allow and rewrite the agent's own tool calls and answer its permission requests (%s %s)"},
		{HookEgressFlag, egress, api.CodeHookEgress, api.SevInfo, "the hooks of %s keep the plugin's egress even when they receive the agent's data: prompts, other tools' input and results (%s %s)"},
	} {
		for _, name := range g.names {
			flag := g.flag + " " + name
			if !installed(name) {
				out = append(out, api.Finding{Code: api.CodeHookTrustUnmatched, Severity: api.SevWarning, Subject: flag,
					Message: fmt.Sprintf("%s names %s, not installed; it will cover whatever is installed under that name next", flag, name),
					Fix:     "remove the flag if it is stale"})
				continue
			}
			out = append(out, api.Finding{Code: g.code, Severity: g.sev, Subject: name,
				Message: fmt.Sprintf(g.msg, name, g.flag, name), Fix: "remove " + flag + " to take it back"})
		}
	}
	return out
}

// ProjectRefusal says why a session's project folder (already resolved: absolute,
// no symlinks) is not handed to a granted hook, or "" when it may be: never the
// whole filesystem, the user's home or a folder holding it, the node's data folder
// (its key, other plugins) or anything holding it or inside it, nor kernel folders.
func ProjectRefusal(project, dataDir, home string) string {
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	switch {
	case project == "" || project[0] != '/':
		return "the session's cwd is not an absolute path"
	case project == "/":
		return "the session's cwd is the whole filesystem"
	case home != "" && within(home, project):
		return "the session's cwd is the home folder " + home + " or holds it"
	case dataDir != "" && (within(dataDir, project) || within(project, dataDir)):
		return "the session's cwd holds or lies in the node's data folder"
	case within(project, "/proc") || within(project, "/sys") || within(project, "/dev"):
		return "the session's cwd is a kernel folder"
	}
	return ""
}
