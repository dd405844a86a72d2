package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/installed"
)

// A plugin is held back when what the node reads to run it is a record that
// cannot be read: its install record or `current` link (installed.RecordError),
// its manifest, or the operator's values for it. It is never dropped silently
// (docs/promises.md, "State the node reads at start"): status lists it with
// why, a finding names the file, its servers are not started, and calls of the
// tools it last offered answer why.

// heldBack gathers the plugins held back by a reconcile: the listing's record
// errors (each raised as a finding naming the file) and the plan's findings for
// plugins it could not plan.
func heldBack(listErrs []error, planFindings []api.Finding) (map[string]string, []api.Finding) {
	held := map[string]string{}
	var findings []api.Finding
	for _, err := range listErrs {
		var re *installed.RecordError
		if !errors.As(err, &re) {
			continue
		}
		held[re.Plugin] = err.Error()
		findings = append(findings, api.Finding{Code: api.CodeRecordUnreadable, Severity: api.SevError, Subject: re.Plugin,
			Message: err.Error() + "; the plugin is held back: not started, its calls answer why",
			Fix:     fmt.Sprintf("reinstall it (oz0-node plugin install SOURCE --commit SHA), or remove it (oz0-node plugin remove %s), or restore %s", re.Plugin, re.File)})
	}
	for _, f := range planFindings {
		if f.Code == api.CodeManifestInvalid || f.Code == api.CodeRecordUnreadable {
			held[f.Subject] = f.Message
		}
	}
	return held, findings
}

// holdBack makes the held plugins' tools answer why they are not served; the
// tools they last offered stay remembered, so each call names its server. A
// plugin held before and no longer is, planned again or gone, is released.
func (d *Daemon) holdBack(before, held map[string]string) {
	for plugin := range before {
		if _, still := held[plugin]; still {
			continue
		}
		d.gw.Forget(plugin, "")
		d.mu.Lock()
		_, planned := d.plugins[plugin]
		d.mu.Unlock()
		if !planned { // removed while held
			for server := range d.gw.Remembered(plugin) {
				d.gw.Forget(plugin, server)
				d.rememberTools(plugin, server, nil)
			}
		}
	}
	for plugin, why := range held {
		d.gw.Refuse(plugin, "", "plugin "+plugin+" is held back: "+why)
		for server := range d.gw.Remembered(plugin) {
			d.gw.Detach(plugin, server, "plugin "+plugin+" is held back: "+why)
		}
	}
}

// heldStatus is a held plugin as status shows it: its name, why, and the servers
// it last ran, each held.
func (d *Daemon) heldStatus(plugin, why string) api.Plugin {
	ap := api.Plugin{Name: plugin, Held: why, Backend: "none", User: "not started (held back)", Servers: []api.Server{}}
	servers := d.gw.Remembered(plugin)
	names := make([]string, 0, len(servers))
	for s := range servers {
		names = append(names, s)
	}
	slices.Sort(names)
	for _, s := range names {
		tools := make([]string, 0, len(servers[s]))
		for _, t := range servers[s] {
			tools = append(tools, plugin+"__"+t)
		}
		ap.Servers = append(ap.Servers, api.Server{Name: s, State: api.StateHeld, Action: "held", Sandbox: "none", Tools: tools,
			Reasons: []string{strings.TrimSpace(why)}})
	}
	return ap
}
