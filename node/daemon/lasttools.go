package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"oz0.ai/node/node/api"
	"oz0.ai/node/node/datadir"
	"oz0.ai/node/node/policy"
)

// maxLastToolsFile bounds a last-tools file read at start.
const maxLastToolsFile = 1 << 20

// loadLastTools gives the gateway each server's tool list from when it last ran,
// so calls of its tools answer why it is not running from the node's first moment.
func (d *Daemon) loadLastTools() {
	dir := d.cfg.Node.Dir.LastToolsDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("last tool lists not read", "dir", dir, "err", err)
		}
		return
	}
	for _, e := range ents {
		plugin, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || plugin == "" || strings.HasPrefix(plugin, ".") || !e.Type().IsRegular() {
			continue
		}
		servers, err := readLastTools(d.cfg.Node.Dir.LastTools(plugin))
		if err != nil {
			// A cache: written anew when the plugin's servers next start.
			d.log.Warn("last tool list unreadable; rebuilt when its servers next start", "plugin", plugin, "err", err)
			continue
		}
		for server, tools := range servers {
			d.gw.Remember(plugin, server, tools)
		}
	}
}

func readLastTools(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLastToolsFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxLastToolsFile {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxLastToolsFile)
	}
	var servers map[string][]string
	if err := json.Unmarshal(b, &servers); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return servers, nil
}

// rememberTools records the tools a server offers now and, if they changed,
// writes its plugin's file (owner-only, atomically). tools nil forgets the
// server; a plugin with no remembered server has no file.
func (d *Daemon) rememberTools(plugin, server string, tools []string) {
	if !d.gw.Remember(plugin, server, tools) {
		return
	}
	path := d.cfg.Node.Dir.LastTools(plugin)
	servers := d.gw.Remembered(plugin)
	if len(servers) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("last tool list not removed", "plugin", plugin, "err", err)
		}
		return
	}
	b, err := json.Marshal(servers)
	if err == nil {
		err = os.MkdirAll(d.cfg.Node.Dir.LastToolsDir(), 0o700)
	}
	if err == nil {
		err = datadir.WriteFileAtomic(path, b, 0o600)
	}
	if err != nil {
		d.log.Warn("last tool list not saved", "plugin", plugin, "server", server, "err", err)
	}
}

// notRunning says why a server does not serve its tools now: the policy's
// refusal, else its state, and for a crashing one the causes its crash-loop
// finding names. Only the state and the node's own findings are told, never the
// server's stderr: the caller is an agent, not the operator.
func (d *Daemon) notRunning(plugin, server string) string {
	k := key(plugin, server)
	d.mu.Lock()
	p := d.plugins[plugin]
	f, looped := d.findings[api.CodeCrashLoop+"|"+k]
	why, held := d.held[plugin]
	d.mu.Unlock()
	if held && p == nil {
		return "held back: " + why
	}
	if p == nil || p.Manifest.Server(server) == nil {
		return ""
	}
	// The policy is asked again, as a call's check asks it (docs/promises.md §9):
	// the last reconcile's decision may predate a change that already ended the
	// server, such as a remote host taken off the tenant's list, whose connection
	// the proxy cuts before the reconcile refuses it.
	t, _ := p.Decision.Server(server)
	if now, err := d.one(plugin); err == nil {
		if nt, ok := now.Decision.Server(server); ok {
			if (nt.Action == policy.Refused) != (t.Action == policy.Refused) {
				d.Reconcile()
			}
			t = nt
		}
	}
	if t.Action == policy.Refused {
		return "refused: " + t.Refusal()
	}
	us, ok := d.sup.Status()[k]
	if !ok {
		return "not started yet"
	}
	crashes := ""
	if us.Restarts > 0 {
		crashes = fmt.Sprintf(" after %d crashes", us.Restarts)
		if looped {
			crashes += " (a crash loop"
			if _, cause, ok := strings.Cut(f.Message, "; likely cause: "); ok {
				crashes += "; likely cause: " + cause
			}
			crashes += ")"
		}
		crashes += "; see oz0-node status and oz0-node logs " + k
	}
	d.mu.Lock()
	unresp, wasUnresponsive := d.findings[api.CodeUnresponsive+"|"+k]
	d.mu.Unlock()
	if wasUnresponsive {
		// What the node saw, never the server's stderr the finding carries.
		why, _, _ := strings.Cut(unresp.Message, "; last stderr: ")
		crashes += " (last seen: " + why + ")"
	}
	switch us.State {
	case api.StateUnresponsive:
		return us.State + crashes
	case api.StateStarting:
		if crashes != "" {
			return "starting again" + crashes
		}
		return "starting; call again in a moment"
	case api.StateCrashed, api.StateBackingOff:
		return us.State + crashes
	case api.StateStopped, api.StateNotStarted:
		return us.State
	}
	return ""
}
